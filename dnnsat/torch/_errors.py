"""The bridge's errors, and the user's source line an error of PyTorch's comes from."""

from __future__ import annotations

import os
import re

from ..graph import GraphError
from ._symbolic import TORCH_DIR

_HERE = os.path.dirname(os.path.abspath(__file__)) + os.sep


class TraceError(GraphError):
    """A model ``from_torch`` cannot represent exactly: names the module or op and the source line."""


class MeasureError(RuntimeError):
    """PyTorch cannot run the model on the meta device (:meth:`TorchModel.measure`): the configuration
    is neither valid nor invalid as far as the check can tell."""


_META = re.compile(r"\bmeta\b", re.IGNORECASE)  # PyTorch's errors about the meta device


def _user_frame(err: BaseException) -> str:
    """``file:line: code`` of the innermost frame of ``err``'s traceback outside torch and dnnsat."""
    import linecache

    found = "<unknown>"
    tb = err.__traceback__
    while tb is not None:
        name = tb.tb_frame.f_code.co_filename
        if not name.startswith((TORCH_DIR, _HERE)):
            found = f"{name}:{tb.tb_lineno}: {linecache.getline(name, tb.tb_lineno).strip()}"
        tb = tb.tb_next
    return found
