"""Analytic peak memory of a training step or an inference forward (DNNMem style), symbolic.

The model replays the network's execution order over *storages* (views and branch selects alias
their input), with the liveness PyTorch gives them, and takes the peak over every moment:

* forward (op ``k``): tensors kept for backward so far (per op: :class:`~dnnsat.graph._catalog.Mem`
  ``saves``/``extra``), every other tensor from its producer to its last consumer (network outputs
  to the end of the step), the output of ``k`` and its forward working set;
* the loss: cross-entropy over the last dimension of the (first) output, int64 class targets; its
  fp32 log-softmax is kept for backward and its backward holds two output-sized gradients;
* backward (reverse order): tensors saved by ops not yet differentiated, the parameter gradients
  accumulated so far, the gradient of every activation from its last consumer's backward to its
  producer's (residuals keep theirs alive), a second contribution being added, the op's backward
  working set;
* ``optimizer.step()``: all parameter gradients, the outputs (still referenced by the loop) and the
  optimizer's temporaries: on the CPU torch runs the for-loop implementation, Adam/AdamW allocate
  ``sqrt(exp_avg_sq)`` and its quotient for one parameter at a time (2 x the largest parameter
  tensor); on CUDA the foreach implementation allocates ``_foreach_sqrt`` of all of them at once
  (1 x all parameters); SGD (with or without momentum) updates in place
  (``torch/optim/adam.py: _single_tensor_adam / _multi_tensor_adam``, ``torch/optim/sgd.py``).

Always live: weights (+ BatchNorm running statistics),
optimizer state (SGD 0, momentum 1x, Adam/AdamW 2x the parameters; fp32 for mixed precision) and
the input batch (+ targets). A GPU device adds the footprint outside the caching allocator (CUDA
context and the libraries the network loads, :func:`~dnnsat.cost.memory.footprint`), rounds
every tensor to the caching allocator's 512-byte blocks, replaces the CPU convolution buffers by one
cuDNN workspace the size of the largest convolution output (an estimate, not validated on a GPU
here), adds PyTorch's cuBLAS workspace and rounds the sum up to 2 MiB segments: a lower bound of what
the GPU sees, as the caching allocator keeps freed blocks reserved. The reserved peak itself comes
from replaying the step's allocation sequence (:func:`allocation_plan`) through a simulation of the
allocator (:mod:`dnnsat.cost.memory._allocator`), configuration by configuration
(:mod:`dnnsat.cost.memory._reserved`).

Mixed precision (``dtype="mixed"``) is a step under ``torch.autocast``: every tensor gets the dtype
autocast gives it (each catalog op's :class:`~dnnsat.graph._catalog.Autocast` policy for the device
type, type promotion for the others, :meth:`_Model.autocast`); an op that casts an input saves the
cast copy instead, 16-bit weight copies live in autocast's cache to the end of the forward (and to
the op's backward when it keeps them), the loss runs in fp32.

What users do to fit memory (:class:`~dnnsat.cost.Budget`): ``checkpoint=True`` runs the outermost
``repeat`` blocks under ``torch.utils.checkpoint`` (:meth:`_Model.checkpoint_blocks`: the forward keeps
only block inputs, the backward of a block sees its recomputed saved tensors);
``accumulation_steps=k`` evaluates everything at the micro-batch (:func:`micro_batches`) with all
parameter gradients alive through the forward and backward of later micro-batches.

CPU convolution buffers depend on the kernels PyTorch runs, which depend on the CPU:
:func:`cpu_conv_working_sets` follows the :class:`~dnnsat.cost.CpuBackend` of a CPU device profile,
or, without a device, the one detected on this machine (oneDNN's ISA within ``ONEDNN_MAX_CPU_ISA``).

Components are a breakdown of the peak, filled in this order: weights, optimizer, input, overhead,
activations (kept for backward at the end of the forward; inference: the largest live set),
gradients (all parameter gradients), and ``memory_transient``, the rest, so that they sum exactly to
``memory``. Everything is in bytes.

Modules: ``_peak`` (the analytic peak: storages, lifetimes, saved tensors, autocast, checkpointing,
optimizer state; :func:`memory_expressions`), ``_cpu`` (CPU kernel rules: oneDNN/ATen convolution and
matmul working sets by ISA, AVX2 vs AVX-512), ``_plan`` (the step's allocation sequence), and on a GPU
``_footprint`` (CUDA context and libraries), ``_allocator`` (the caching allocator's simulation) and
``_reserved`` (the simulated reserved peak per configuration).
"""

from ._allocator import (
    AllocatorConfig,
    AllocatorResult,
    CachingAllocator,
    round_size,
    simulate,
)
from ._batches import batch_values, micro_batches
from ._cpu import (
    CONV_OPS,
    cpu_bf16_matmul_scratch,
    cpu_conv_transpose_working_sets,
    cpu_conv_working_sets,
)
from ._footprint import LIBRARY_OPS, cublas_workspace, footprint
from ._peak import CUDA_BLOCK, CUDA_SEGMENT, MEMORY_KEYS, memory_expressions
from ._plan import AllocationPlan, allocation_plan
from ._reserved import CACHE, GpuMemory, ReservedMemory

__all__ = [
    "AllocationPlan",
    "AllocatorConfig",
    "AllocatorResult",
    "CACHE",
    "CONV_OPS",
    "CUDA_BLOCK",
    "CUDA_SEGMENT",
    "CachingAllocator",
    "GpuMemory",
    "LIBRARY_OPS",
    "MEMORY_KEYS",
    "ReservedMemory",
    "allocation_plan",
    "batch_values",
    "cpu_bf16_matmul_scratch",
    "cpu_conv_transpose_working_sets",
    "cpu_conv_working_sets",
    "cublas_workspace",
    "footprint",
    "memory_expressions",
    "micro_batches",
    "round_size",
    "simulate",
]
