"""Both adapters and the Problem's queries decide exactly as recorded (tests/data/trial_sequences.json).

The file was written by the code before the package restructuring (issue 31) and matched after it; a
change that alters any decision on these problems fails here. Rewrite it on purpose only, with
``python -m tests._trial_sequences --write``.
"""

from __future__ import annotations

import json

import pytest

from tests import _trial_sequences as seq

RECORDED = json.loads(seq.DATA.read_text())


@pytest.mark.parametrize("name", ["gpt-memory", "nb201-latency"])
def test_queries_and_optuna_tpe_as_recorded(name: str) -> None:
    p = seq.PROBLEMS[name]()
    assert seq._plain(seq.queries(p)) == RECORDED[name]["queries"]
    assert seq._plain(seq.optuna_sequence(seq.PROBLEMS[name](), "tpe")) == RECORDED[name]["optuna/tpe"]


def test_nni_tpe_as_recorded() -> None:
    got = seq._plain(seq.nni_sequence(seq.PROBLEMS["resnet-memory"](), "TPE"))
    assert got == RECORDED["resnet-memory"]["nni/TPE"]


@pytest.mark.slow
def test_everything_as_recorded() -> None:
    assert seq.record() == RECORDED
