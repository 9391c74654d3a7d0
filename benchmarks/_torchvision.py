"""``import_torchvision()``: torchvision's models on a machine whose torchvision C++ ops cannot load.

A torchvision wheel built for another torch variant (a CUDA wheel next to CPU torch) fails at import:
``torchvision/_meta_registrations.py`` registers fake kernels for ``torchvision::nms`` and friends, and
raises ``RuntimeError: operator torchvision::nms does not exist`` when the C++ library did not load.
The models (``torchvision.models``) do not use those ops, so where the plain import fails this way the
partial import is discarded and torchvision is imported again with an empty stand-in for
``torchvision._meta_registrations``. Where torchvision imports cleanly nothing is changed.
"""

from __future__ import annotations

import importlib
import sys
import types

_META = "torchvision._meta_registrations"


def import_torchvision() -> types.ModuleType:
    """The ``torchvision`` module, importable for its models even without its C++ ops (see above)."""
    try:
        return importlib.import_module("torchvision")
    except RuntimeError as err:
        if "torchvision::" not in str(err):
            raise
    for name in [n for n in sys.modules if n == "torchvision" or n.startswith("torchvision.")]:
        del sys.modules[name]
    sys.modules.setdefault(_META, types.ModuleType(_META))
    return importlib.import_module("torchvision")
