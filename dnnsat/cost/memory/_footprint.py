"""GPU memory outside PyTorch's caching allocator: the CUDA context and the libraries a network loads.

A process that trains on a GPU holds, besides the allocator's segments, the CUDA context (with
PyTorch's kernels) and, once first used, each library's handle and loaded kernels: cuBLAS (linear,
matmul, attention projections), cuDNN (convolutions, batch norm over 3+ dimensions, LSTM/GRU) and the
kernels of scaled-dot-product attention. ``footprint = context_bytes + libraries[stack]`` for every
stack the configuration runs (a gated-off op loads nothing). The numbers are per device profile
(:class:`~dnnsat.cost.DeviceProfile`: catalog defaults with their sources, or measured by
``dnnsat calibrate --device cuda``). cuBLAS's *workspace* is different: PyTorch allocates it through
the caching allocator, so it is one allocation of the simulated sequence
(:func:`cublas_workspace`). All figures are bytes.
"""

from __future__ import annotations

from typing import Any

from ...expr import Const, Expr, any_, where
from ...graph import Network

__all__ = ["LIBRARY_OPS", "footprint", "cublas_workspace"]

# catalog ops -> the GPU software stacks PyTorch runs them with
LIBRARY_OPS: dict[str, frozenset[str]] = {
    "cublas": frozenset({"linear", "matmul", "bmm", "einsum", "attention", "sdpa"}),
    "cudnn": frozenset(
        {
            "conv1d",
            "conv2d",
            "conv3d",
            "conv_transpose1d",
            "conv_transpose2d",
            "conv_transpose3d",
            "batchnorm",
            "lstm",
            "gru",
        }
    ),
    "attention": frozenset({"attention", "sdpa"}),
}


def _runs(net: Network, node: Any, library: str) -> bool:
    """Whether ``node`` runs on ``library``: batch norm takes cuDNN only on inputs of 3 or more
    dimensions (``aten/src/ATen/native/Normalization.cpp: _select_batch_norm_backend``; a
    ``BatchNorm1d`` after a linear layer runs PyTorch's own kernel)."""
    if node.op not in LIBRARY_OPS[library]:
        return False
    return node.op != "batchnorm" or len(net.tensors[node.inputs[0]].shape) >= 3


def _used(net: Network, library: str) -> Expr:
    """Whether some op of ``library`` runs (an expression over the space: the ops' gates)."""
    gates = [n.gate for n in net.ops() if _runs(net, n, library)]
    return any_(gates) if gates else Const(False)


def footprint(net: Network, device: Any) -> Expr:
    """Bytes of GPU memory ``net`` needs outside the caching allocator on ``device`` (context and
    libraries); 0 on a CPU. A device without ``libraries`` (a stand-in profile) counts its context."""
    if device is None or getattr(device, "kind", "cpu") != "gpu":
        return Const(0)
    total: Expr = Const(int(getattr(device, "context_bytes", 0) or 0))
    for library, nbytes in (getattr(device, "libraries", None) or {}).items():
        if nbytes:
            total = total + where(_used(net, library), int(nbytes), 0)
    return total


def cublas_workspace(net: Network, device: Any) -> Expr:
    """Bytes of the cuBLAS workspace PyTorch allocates at ``net``'s first GEMM on ``device`` (0 without
    a GEMM or a GPU)."""
    nbytes = int(getattr(device, "cublas_workspace_bytes", 0) or 0)
    if not nbytes or getattr(device, "kind", "cpu") != "gpu":
        return Const(0)
    return where(_used(net, "cublas"), nbytes, 0)
