"""Latency model: a per-op roofline with launch overhead on a device profile, in execution order.

Each active catalog op (``node.gate``) of class ``c`` costs (seconds)::

    t_op = max(work / (peak(dtype) * eff_c), bytes / (bandwidth * eff_memory))

``work`` is the op's forward FLOPs for matmul-like ops (2 FLOPs per multiply-add) and its other arithmetic
(``info.ops``) otherwise; GEMM-like work is padded to whole channel blocks of the device
(``profile.channel_block``: input and output channels, features, attention head dim), as SIMD units and
tiles compute whole blocks. ``bytes`` is what the op reads and writes (``io`` elements: activations at
``budget.act_bytes``, parameters at ``budget.param_bytes``, both ``budget.dtype_bytes`` when the budget has
no such fields), moved at ``profile.cache_bandwidth`` when they fit in ``profile.cache_bytes`` and at
``profile.memory_bandwidth`` otherwise. Classes (:data:`OP_TABLE`): ``matmul`` (linear, matmul/bmm,
attention projections), ``attention`` (fused scaled-dot-product attention), ``conv`` (k x k), ``pointwise``
(1 x 1), ``grouped_conv`` (groups > 1, depthwise), ``recurrent``, ``elementwise``, ``norm``, ``pool`` and
``copy`` (copies, lookups). A class's efficiency is the profile's own factor for it, else ``compute *
CLASS_SCALE[class]``. Each op also launches ``launches`` kernels, each costing ``launch_overhead_s`` of
host-side dispatch.

* CPU (``kind == "cpu"``): dispatch and kernels run one after the other:
  ``latency = sum(t_op + launches * launch_overhead_s)``. Where the profile has ``conv_overhead_s > 0``
  (``calibrate``'s profiles: PyTorch eager's oneDNN path), each convolution PyTorch hands to oneDNN
  (ATen's rule, :func:`_runs_onednn`) also costs ``conv_overhead_s`` plus a memory-bound reorder of its
  input, output (each read and written) and weights to oneDNN's blocked layout and back, and the other
  convolutions (ATen's im2col + GEMM kernels) are class ``aten_conv``, work padded like a matmul's; its input
  channels are not padded below one block (oneDNN's plain-source kernels), and a grouped convolution runs
  oneDNN's direct kernels at ``sub-block / block`` of the vector width when its channels per group are a
  multiple of a sub-block, else im2col + GEMM (:func:`_onednn_grouped`).
* Mobile CPU (``kind == "mobile_cpu"``: phones, Raspberry Pi, running a deployment runtime such as
  TFLite/XNNPACK): summed like a CPU, ``launch_overhead_s`` being the runtime's per-op overhead, plus
  ``parallel_overhead_s`` per GEMM-like op (convolutions, matmuls), which the runtime spreads over the
  cores through a thread pool (wake-up, barrier); CPUs may set it too (0: none). 1x1 and k x k
  convolutions share the class ``conv`` (XNNPACK/Ruy run both through the same GEMM micro-kernels, where
  PyTorch's CPU path differs). Batch norms run as their own op (runtimes fed through ONNX keep them; a
  converter that folds them is not modelled).
  ``channel_block`` is the NEON width (4 fp32 lanes), ``cache_bytes``/``cache_bandwidth`` the L2.
* Accelerator (``kind == "accelerator"``: systolic-array ASICs such as Eyeriss, FPGA designs): layers run
  one after the other (summed like a CPU, ``launch_overhead_s`` per layer for configuration), on a PE
  array of ``array_rows`` x ``array_cols`` MAC units (``peak`` = PEs x clock x 2 FLOPs). The dataflow maps
  input channels (features) onto rows and output channels onto columns, so GEMM-like work is padded to
  whole rows and columns (utilisation ``c_in / (ceil(c_in / rows) * rows)`` x the same for ``c_out``);
  a depthwise convolution uses one row per column. Batch norms after a convolution are folded and
  activation functions are applied on the fly as data leaves the array (no op, no DRAM pass). DRAM
  traffic of a layer with weights: its weights once, its output once, and its input once per weight tile
  that fits half the on-chip buffer: ``in * ceil(weights / (buffer_bytes / 2)) + weights + out`` bytes,
  moved at ``memory_bandwidth``; other ops move their input and output once. 1x1 convolutions are class
  ``conv`` (the same array and dataflow).
* GPU: kernels run asynchronously to the host, which dispatches op ``i`` at
  ``issue_i = issue_{i-1} + launches_i * launch_overhead_s``; the kernel starts when issued and when
  the previous kernel ends: ``end_i = max(issue_i, end_{i-1}) + t_op``, and ``latency = end_last``
  (launch-bound networks cost their dispatch time, compute-bound ones their kernel time).

``train_step_time`` = forward (dropout active) + backward in reverse order + optimizer step. Backward per
class: matmul-like ops do 2x their forward FLOPs (input and weight gradients) in 2 kernels (``attention``
2.5x: the fused backward recomputes the scores); ``norm`` 2x its arithmetic; ``elementwise``, ``pool`` and
``copy`` ops 1x; every op moves 2x its forward bytes (reads the output gradient and the saved tensors,
writes the input (and weight) gradients). The optimizer step is memory-bound: it reads and writes per
parameter ``3`` (SGD: weight, gradient, new weight), ``5`` (momentum) or ``7`` (Adam/AdamW) elements at
``param_bytes``, in 1 / 2 / 4 kernels per parameterised op. These factors are estimates (not validated
against measurements in this version).

Modules: ``_roofline`` (the per-op roofline and the schedules: summed on CPUs, mobile CPUs and
accelerators, pipelined behind dispatch on GPUs), ``_kinds`` (how each device kind maps GEMM-like work;
the CPU's oneDNN convolution path), ``_terms`` (the op table; forward, backward and optimizer kernel
groups), ``_model`` (:func:`latency_expressions`, :func:`latency_model`) and ``_fit``
(:func:`fit_device`).
"""

from ._fit import PRIOR_GRID, PROBE_PRIOR_WEIGHT, fit_device
from ._model import DEFAULT_DEVICE, LatencyModel, latency_expressions, latency_model
from ._roofline import CLASS_SCALE, class_efficiency
from ._terms import OP_TABLE

__all__ = [
    "CLASS_SCALE",
    "DEFAULT_DEVICE",
    "LatencyModel",
    "OP_TABLE",
    "PRIOR_GRID",
    "PROBE_PRIOR_WEIGHT",
    "class_efficiency",
    "fit_device",
    "latency_expressions",
    "latency_model",
]
