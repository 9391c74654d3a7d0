"""Measure real tensor memory: a tracker of allocator events and the peak of one training step.

On the CPU, :class:`MemoryTracker` reads the allocation events PyTorch's own profiler records from
the c10 CPU allocator (``profile_memory=True``): every allocation made while tracking, kernel-internal
temporaries included, and the frees of those blocks (paired by address). Tensors alive before
tracking (parameters, buffers, optimizer state, the input batch) are passed in and counted once per
storage. On CUDA it uses the
caching allocator's statistics (``torch.cuda.max_memory_allocated`` / ``max_memory_reserved``).
All figures are bytes.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch

__all__ = ["MemoryTracker", "MemoryMeasurement", "track_memory", "peak_memory", "storage_bytes"]

OPTIMIZERS = ("sgd", "momentum", "adam", "adamw")


def _tensors(obj: Any) -> Iterable[torch.Tensor]:
    """Tensors held by ``obj``: a tensor, a module (parameters, grads, buffers), an optimizer (state)
    or a (nested) sequence/mapping of those."""
    if isinstance(obj, torch.Tensor):
        yield obj
        if obj.grad is not None:
            yield obj.grad
    elif isinstance(obj, torch.nn.Module):
        for t in (*obj.parameters(), *obj.buffers()):
            yield from _tensors(t)
    elif isinstance(obj, torch.optim.Optimizer):
        for state in obj.state.values():
            yield from _tensors(list(state.values()))
    elif isinstance(obj, dict):
        for v in obj.values():
            yield from _tensors(v)
    elif isinstance(obj, list | tuple):
        for v in obj:
            yield from _tensors(v)


def storage_bytes(*objs: Any) -> int:
    """Bytes of the distinct storages held by ``objs`` (tensors, modules, optimizers, sequences)."""
    seen: set[tuple[str, int]] = set()
    total = 0
    for t in (t for o in objs for t in _tensors(o)):
        st = t.untyped_storage()
        key = (str(t.device), st.data_ptr())
        if key in seen or st.nbytes() == 0:
            continue
        seen.add(key)
        total += st.nbytes()
    return total


class MemoryTracker:
    """Context manager tracking live tensor bytes on one device (``"cpu"`` or ``"cuda[:i]"``).

    ``tracked``: objects alive before tracking starts whose storages count in the baseline (modules,
    optimizers, tensors). After exit: ``baseline`` (bytes live at entry), ``peak`` (most bytes live at
    once), ``current`` (bytes live at exit), and on CUDA ``peak_reserved`` (caching allocator segments).
    On the CPU, allocations of other threads during tracking count too; run one workload at a time.
    """

    def __init__(self, *tracked: Any, device: str | torch.device = "cpu") -> None:
        self.device = torch.device(device)
        self._tracked = tracked
        self.baseline = 0
        self.peak = 0
        self.current = 0
        self.peak_reserved: int | None = None
        self._prof: Any = None
        self._start_cuda = 0

    def __enter__(self) -> MemoryTracker:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
            torch.cuda.reset_peak_memory_stats(self.device)
            self._start_cuda = torch.cuda.memory_allocated(self.device)
            self.baseline = self._start_cuda
            return self
        if self.device.type != "cpu":
            raise ValueError(f"MemoryTracker: device must be 'cpu' or 'cuda', got {self.device}")
        from torch.profiler import ProfilerActivity, profile

        self.baseline = storage_bytes(*self._tracked)
        self._prof = profile(activities=[ProfilerActivity.CPU], profile_memory=True)
        self._prof.__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
            self.peak = torch.cuda.max_memory_allocated(self.device)
            self.current = torch.cuda.memory_allocated(self.device)
            self.peak_reserved = torch.cuda.max_memory_reserved(self.device)
            return
        self._prof.__exit__(*exc)
        if exc[0] is not None:
            return
        events = sorted(_allocation_events(self._prof.profiler.kineto_results.experimental_event_tree()))
        # pair frees with this session's allocations by address: the allocator's own running total
        # also drops for blocks it remembers from earlier profiling sessions
        live: dict[int, int] = {}
        total = peak = 0
        for _, nbytes, ptr in events:
            if nbytes > 0:
                live[ptr] = nbytes
                total += nbytes
                peak = max(peak, total)
            elif ptr in live:
                total -= live.pop(ptr)
        self.peak = self.baseline + peak
        self.current = self.baseline + total


def _allocation_events(roots: Sequence[Any]) -> list[tuple[int, int, int]]:
    """``(time_ns, bytes, address)`` of the CPU allocator events in a profiler event tree (frees < 0)."""
    out: list[tuple[int, int, int]] = []
    stack = list(roots)
    while stack:
        e = stack.pop()
        extra = e.extra_fields
        if type(extra).__name__ == "_ExtraFields_Allocation" and extra.device.type == "cpu":
            out.append((e.start_time_ns, int(extra.alloc_size), int(extra.ptr)))
        stack.extend(e.children)
    return out


def track_memory(*tracked: Any, device: str | torch.device = "cpu") -> MemoryTracker:
    """``with track_memory(model, optimizer, batch) as mt: ...``, then ``mt.peak`` bytes (MemoryTracker)."""
    return MemoryTracker(*tracked, device=device)


@dataclass
class MemoryMeasurement:
    """Peak memory of one steady-state step (bytes), measured with :class:`MemoryTracker`.

    ``peak``: most bytes live at once during the last step (parameters, buffers, optimizer state and
    inputs included); ``baseline``: bytes live when it starts; ``params``/``buffers``/``optimizer``/
    ``inputs``: the baseline's parts; ``peak_reserved``: CUDA caching-allocator peak (None on the CPU).
    """

    peak: int
    baseline: int
    params: int
    buffers: int
    optimizer: int
    inputs: int
    peak_reserved: int | None = None


def make_optimizer(
    name: str, params: Iterable[torch.nn.Parameter], lr: float = 1e-3
) -> torch.optim.Optimizer:
    """The torch optimizer ``name``: ``sgd``, ``momentum`` (SGD, momentum 0.9), ``adam``, ``adamw``."""
    if name == "sgd":
        return torch.optim.SGD(params, lr=lr)
    if name == "momentum":
        return torch.optim.SGD(params, lr=lr, momentum=0.9)
    if name == "adam":
        return torch.optim.Adam(params, lr=lr)
    if name == "adamw":
        return torch.optim.AdamW(params, lr=lr)
    raise ValueError(f"optimizer must be one of {OPTIMIZERS}, got {name!r}")


def _first_tensor(out: Any) -> torch.Tensor:
    """The model's output proper: ``out`` itself, or the first tensor of a (nested) tuple, list or dict
    (a Hugging Face ``ModelOutput``: ``last_hidden_state`` / ``logits``)."""
    found = next(iter(_tensors(out)), None)
    if found is None:
        raise TypeError(f"peak_memory: forward returned no tensor ({type(out).__name__})")
    return found


def cross_entropy_targets(out: torch.Tensor) -> torch.Tensor:
    """Class-index targets (zeros, int64) for the output ``(..., classes)``."""
    return torch.zeros(out.shape[:-1], dtype=torch.long, device=out.device)


def peak_memory(
    module: torch.nn.Module,
    example_inputs: Sequence[Any] | Mapping[str, Any],
    train: bool = True,
    optimizer: str = "adam",
    steps: int = 2,
    autocast: torch.dtype | None = None,
    grad_scaler: bool = False,
) -> MemoryMeasurement:
    """Peak bytes of the last of ``steps`` training steps (or of one no-grad eval forward).

    ``example_inputs``: forward's positional arguments, or a dict of keyword ones (``module(**x)``,
    Hugging Face style); ``None`` values are passed as they are.
    A training step is what a plain loop does: ``zero_grad(set_to_none=True)``, ``out = module(*x)``,
    ``loss = cross_entropy(out, targets)`` over the last dimension (int64 class targets), ``backward``,
    ``optimizer.step()`` with the torch optimizer ``optimizer`` (``sgd``, ``momentum``, ``adam``,
    ``adamw``; default implementation of the device). ``out`` stays referenced until the step ends; when
    forward returns a tuple, list or dict (a ``ModelOutput``), the loss is taken on its first tensor.
    Inference: ``module.eval()`` and ``module(*x)`` under ``torch.no_grad()``, output kept.
    ``autocast`` (e.g. ``torch.bfloat16``): mixed precision, forward (and loss) under ``torch.autocast``.
    ``grad_scaler``: the float16 recipe, ``torch.amp.GradScaler`` scales the loss, unscales the gradients
    and checks them for inf/NaN before ``optimizer.step()`` (its state counts in the peak, not the baseline).
    """
    if steps < 1:
        raise ValueError(f"peak_memory: steps must be >= 1, got {steps}")
    params = list(module.parameters())
    args, kwargs = (
        ([], dict(example_inputs)) if isinstance(example_inputs, Mapping) else (list(example_inputs), {})
    )
    inputs = [*args, *kwargs.values()]
    device = params[0].device if params else next(t for t in _tensors(inputs)).device
    weights = [p.detach() for p in params]  # without their .grad
    buffers = list(module.buffers())

    def forward() -> Any:
        with torch.autocast(device.type, dtype=autocast or torch.float32, enabled=autocast is not None):
            return module(*args, **kwargs)

    if not train:
        for p in params:
            p.grad = None
        module.eval()
        with torch.no_grad():
            for _ in range(steps - 1):
                forward()
            with track_memory(weights, buffers, inputs, device=device) as mt:
                out = forward()
            del out
        return MemoryMeasurement(
            mt.peak,
            mt.baseline,
            storage_bytes(weights),
            storage_bytes(buffers),
            0,
            storage_bytes(inputs),
            mt.peak_reserved,
        )
    module.train()
    opt = make_optimizer(optimizer, params)
    scaler = torch.amp.GradScaler(device.type) if grad_scaler else None
    with torch.no_grad():
        probe = _first_tensor(module(*args, **kwargs))
    targets = cross_entropy_targets(probe)
    del probe

    def step() -> None:
        out = forward()
        with torch.autocast(device.type, dtype=autocast or torch.float32, enabled=autocast is not None):
            loss = torch.nn.functional.cross_entropy(_first_tensor(out).flatten(0, -2), targets.flatten())
        if scaler is None:
            loss.backward()
            opt.step()
        else:
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()
        del out, loss

    for _ in range(steps - 1):
        opt.zero_grad(set_to_none=True)
        step()
    opt.zero_grad(set_to_none=True)
    parts = dict(
        params=storage_bytes(weights),
        buffers=storage_bytes(buffers),
        optimizer=storage_bytes(opt),
        inputs=storage_bytes(inputs, targets),
    )
    with track_memory(weights, buffers, opt, inputs, targets, device=device) as mt:
        step()
    return MemoryMeasurement(mt.peak, mt.baseline, **parts, peak_reserved=mt.peak_reserved)
