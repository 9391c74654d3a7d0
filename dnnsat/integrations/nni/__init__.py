"""NNI integration: :class:`DnnSATTuner` wraps a built-in NNI tuner so only feasible trials are launched.

Needs the ``nni`` extra (``pip install dnnsat[nni]``). Register it for ``nnictl`` with
``nnictl algo register --meta <this package>/dnnsat_tuner.yml`` (see :func:`registration_file`), or use it
from the Python API through ``CustomAlgorithmConfig(class_name="dnnsat.integrations.nni.DnnSATTuner", ...)``.
"""

from __future__ import annotations

from dnnsat.space import config_from_nni, config_to_nni

from ._registration import registration_file
from ._tuner import MODES, DnnSATClassArgsValidator, DnnSATTuner, TunerStats, load_problem

__all__ = [
    "DnnSATTuner",
    "DnnSATClassArgsValidator",
    "TunerStats",
    "MODES",
    "load_problem",
    "registration_file",
    "config_from_nni",
    "config_to_nni",
]
