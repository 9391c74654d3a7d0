"""Mixed precision on an AMX CPU: the model says its CPU memory is not validated there (it follows
AVX-512 BF16's kernels), and only there."""

from __future__ import annotations

import logging

import pytest

from dnnsat.cost import Budget, get_device
from dnnsat.cost.memory import memory_expressions
from dnnsat.graph import Network


def _conv() -> Network:
    net = Network()
    x = net.input((2, 24, 12, 12))
    return net.output(net.conv2d(x, 24, 3, padding=1, groups=4))


@pytest.mark.parametrize(
    ("isa", "dtype", "warns"),
    [
        ("avx512_core_amx", "mixed", True),
        ("avx512_core_amx_fp16", "mixed", True),
        ("avx512_core_amx", "float32", False),
        ("avx512_core_bf16", "mixed", False),
        ("avx2", "mixed", False),
    ],
)
def test_mixed_precision_on_amx_warns_that_it_is_not_validated(
    caplog: pytest.LogCaptureFixture, isa: str, dtype: str, warns: bool
) -> None:
    device = get_device("cpu").replace(isa=isa)
    with caplog.at_level(logging.WARNING, logger="dnnsat.cost"):
        memory_expressions(_conv(), Budget(mode="train", optimizer="sgd", dtype=dtype), device)
    assert ("(AMX) is not validated" in caplog.text) == warns
