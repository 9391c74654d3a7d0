"""Symbolic tensors during a trace: :class:`STensor` (a tensor of the region's network) and the
opaque secondary outputs that may not be used."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import torch

from ..graph import Tensor
from ._errors import TraceError
from ._symbolic import fixed, user_line

if TYPE_CHECKING:
    from ._capture import _Trace


# ------------------------------------------------------------------------------------------------
# symbolic tensors


class Size(tuple[Any, ...]):
    """A symbolic tensor's shape: a tuple of sizes with ``torch.Size``'s ``numel()``."""

    def numel(self) -> Any:
        return math.prod(self)

    def __getitem__(self, index: Any) -> Any:
        out = tuple.__getitem__(self, index)
        return Size(out) if isinstance(index, slice) else out


class STensor:
    """A symbolic tensor during a trace: a :class:`~dnnsat.graph.Tensor` of the region's network."""

    def __init__(self, trace: _Trace, t: Tensor, dtype: torch.dtype | None = None) -> None:
        self._trace = trace
        self._t = t
        # the PyTorch dtype the model's code sees (the network's tensor has float32, int64 or bool)
        self._dtype = dtype or _TORCH_DTYPES[t.dtype]
        self.watched = False  # reached the model's own code: notes when Python frees it (_Trace.held)

    @property
    def is_bool(self) -> bool:
        """A boolean tensor (an attention mask)."""
        return self._dtype == torch.bool

    @is_bool.setter
    def is_bool(self, value: bool) -> None:
        if value:
            self._dtype = torch.bool

    # shape queries -------------------------------------------------------------------------------
    @property
    def shape(self) -> Size:
        return Size(self._trace.sym(d) for d in self._t.shape)

    @property
    def data(self) -> STensor:
        return self

    def detach(self) -> STensor:
        return self

    def size(self, dim: int | None = None) -> Any:
        return self.shape if dim is None else self.shape[fixed(dim)]

    def numel(self) -> Any:
        return self.shape.numel()

    def dim(self) -> int:
        return self._t.ndim

    @property
    def ndim(self) -> int:
        return self._t.ndim

    @property
    def dtype(self) -> torch.dtype:
        return self._dtype

    is_nested = is_sparse = is_quantized = False  # (asked by torch.nn's fast-path checks)

    def is_floating_point(self) -> bool:
        return self._dtype.is_floating_point

    @property
    def device(self) -> torch.device:
        return torch.device("meta")

    def __len__(self) -> int:
        return int(self.shape[0])

    # operators -----------------------------------------------------------------------------------
    def __add__(self, other: Any) -> Any:
        return self._trace.call("add", (self, other), {})

    def __radd__(self, other: Any) -> Any:
        return self._trace.call("add", (other, self), {})

    def __sub__(self, other: Any) -> Any:
        return self._trace.call("sub", (self, other), {})

    def __rsub__(self, other: Any) -> Any:
        return self._trace.call("sub", (other, self), {})

    def __neg__(self) -> Any:
        return self._trace.call("neg", (self,), {})

    def __mul__(self, other: Any) -> Any:
        return self._trace.call("mul", (self, other), {})

    def __rmul__(self, other: Any) -> Any:
        return self._trace.call("mul", (other, self), {})

    def __truediv__(self, other: Any) -> Any:
        return self._trace.call("div", (self, other), {})

    def __matmul__(self, other: Any) -> Any:
        return self._trace.call("matmul", (self, other), {})

    def __rmatmul__(self, other: Any) -> Any:
        return self._trace.call("matmul", (other, self), {})

    def __iter__(self) -> Any:
        """The rows (``q, k, v = qkv``); each further row is a guard on a symbolic first dimension."""
        i = 0
        while i < self.shape[0]:
            yield self[i]
            i += 1

    def __getitem__(self, index: Any) -> Any:
        return self._trace.call("__getitem__", (self, index), {})

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)

        def method(*args: Any, **kwargs: Any) -> Any:
            return self._trace.call(name, (self, *args), kwargs)

        return method

    def __bool__(self) -> bool:
        raise TraceError(
            f"a tensor's value decides control flow (not supported): {user_line()}; dnnsat follows sizes, "
            f"not values: decide from sizes (x.shape) or hyperparameters instead; if the tensor is an input "
            f"of known value (an all-ones attention mask, which Hugging Face models treat as no mask), leave "
            f"it out: inputs(cfg) may give None for it, or a dict of forward's keyword arguments without it"
        )

    @classmethod
    def __torch_function__(cls, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        trace = next(a._trace for a in _flat(args, kwargs or {}) if isinstance(a, STensor))
        return trace.call(getattr(func, "__name__", ""), tuple(args), dict(kwargs or {}))

    def __repr__(self) -> str:
        return f"STensor({self._t!r})"


_TORCH_DTYPES = {"float32": torch.float32, "int64": torch.int64, "bool": torch.bool}


def network_dtype(dtype: torch.dtype) -> str:
    """The network's dtype of a PyTorch one: integers are ``int64``, booleans ``bool``, floating types
    ``float32`` (the budget's activation dtype: a model's half-precision buffers count as activations)."""
    if dtype == torch.bool:
        return "bool"
    return "float32" if dtype.is_floating_point or dtype.is_complex else "int64"


def _operator(name: str) -> Any:
    def method(self: STensor, *args: Any) -> Any:
        return self._trace.call(name, (self, *args), {})

    method.__name__ = name
    return method


def _view_property(name: str) -> Any:
    def get(self: STensor) -> Any:
        return self._trace.call(name, (self,), {}, lambda t: getattr(t, name))

    return property(get)


# comparisons and the other operators of torch.Tensor, and its transposing properties (traced by the ATen
# fallback, dnnsat/torch/_aten.py)
for _name in ("__lt__", "__le__", "__gt__", "__ge__", "__eq__", "__ne__", "__pow__", "__rpow__",
              "__rtruediv__", "__floordiv__", "__mod__", "__and__", "__or__", "__xor__", "__invert__",
              "__abs__"):  # fmt: skip
    setattr(STensor, _name, _operator(_name))
# == is elementwise, as torch's: an STensor stays hashable by identity (dict keys, sets of the tracer)
STensor.__hash__ = object.__hash__  # type: ignore[assignment,method-assign]
for _name in ("T", "mT"):
    setattr(STensor, _name, _view_property(_name))


class OpaqueUsed(TraceError):
    """A use of an :class:`_Opaque` output of the module at ``path``: the trace is run again with that
    module's calls traced through its ``forward`` (see ``_regions._traced``)."""

    def __init__(self, message: str, path: str) -> None:
        super().__init__(message)
        self.path = path


class _Opaque:
    """A secondary output a module's catalog op does not make (an RNN's final states, attention
    weights) of the module at ``path``: any use raises :class:`OpaqueUsed` (``path`` ``None``: a
    :class:`TraceError`, where the module's ``forward`` cannot be traced instead)."""

    def __init__(self, what: str, path: str | None) -> None:
        self.what, self.path = what, path

    def _used(self, *_: Any) -> Any:
        message = f"{self.what} is not supported as a value: {user_line()}"
        if self.path is None:
            raise TraceError(message)
        raise OpaqueUsed(message, self.path)

    __getattr__ = __getitem__ = __iter__ = __len__ = __bool__ = _used
    __add__ = __radd__ = __mul__ = __rmul__ = __sub__ = __rsub__ = __truediv__ = __matmul__ = _used

    @classmethod
    def __torch_function__(cls, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        opaque = next(a for a in _flat(args, kwargs or {}) if isinstance(a, _Opaque))
        return opaque._used()


def _t(x: STensor) -> Tensor:
    return x._t


def _flat(args: Any, kwargs: Any) -> list[Any]:
    out: list[Any] = []
    stack = [*args, *kwargs.values()]
    while stack:
        a = stack.pop()
        if isinstance(a, tuple | list):
            stack.extend(a)
        else:
            out.append(a)
    return out
