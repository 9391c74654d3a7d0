"""GPU memory as the GPU sees it: the caching allocator's reserved peak plus the library footprint.

:class:`ReservedMemory` replays a network's allocation sequence (:func:`~dnnsat.cost.memory.allocation_plan`)
at one configuration through the caching-allocator simulation (:mod:`dnnsat.cost.memory._allocator`), on the
memory the budget leaves to PyTorch (``limit - footprint``, :mod:`dnnsat.cost.memory._footprint`). The
configuration fits when no request runs out of memory there (the allocator's free-and-retry path
included). It is a function of the configuration, not a formula: :func:`~dnnsat.problem._model.attach` adds it
as a per-configuration constraint (``"memory_reserved"``) next to the symbolic ``memory`` bound, which
prunes ranges (the allocation peak is a lower bound of the reserved peak).

Cost (``python -m benchmarks.allocator_perf``, CPU time on one core): 2.5 ms per configuration for a
100-layer MLP, 4.7 ms for a 100-convolution CNN (two training steps, 3,000-7,000 allocator requests);
``p.costs`` is unaffected. Searches pay it on every point the engine enumerates: an opaque constraint
leaves every box undecided, so the first ``sample``/pruning of a large space checks tens of thousands
of points (``zoo.cnn``: ~64,000, ~85 s; later calls reuse the remembered verdicts).
``Budget(simulate=False)`` keeps the symbolic bound alone.

Checked on a real GPU against 66 public A100-SXM4-40GB MLP training runs (GPUMemNet, nvidia-smi peaks;
``python -m benchmarks.gpumemnet``): ``footprint + peak_reserved`` within -2.0 % to +1.5 %.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ...graph import Network
from ._allocator import AllocatorConfig, CachingAllocator
from ._footprint import footprint
from ._plan import allocation_plan

__all__ = ["GpuMemory", "ReservedMemory", "CACHE"]

CACHE = 1 << 18  # configurations whose verdict a ReservedMemory remembers


@dataclass(frozen=True)
class GpuMemory:
    """One configuration on the GPU (bytes): ``footprint`` (context and libraries, outside the allocator),
    ``peak_reserved`` and ``peak_allocated`` (the allocator's peaks, as ``torch.cuda.max_memory_reserved``
    / ``max_memory_allocated`` report them), ``total = footprint + peak_reserved`` (what ``nvidia-smi``
    shows at the peak), ``capacity`` (bytes the allocator had) and ``fits`` (no out-of-memory error;
    ``oom_request``: the size of the request that failed)."""

    footprint: int
    peak_reserved: int
    peak_allocated: int
    capacity: int
    fits: bool
    oom_request: int | None = None

    @property
    def total(self) -> int:
        return self.footprint + self.peak_reserved


class ReservedMemory:
    """The per-configuration GPU memory check of ``net`` under ``budget`` (a GPU device and a memory
    limit: ``budget.limits()["memory"]``, the margin applied). ``space``: the search space, to encode
    configurations given as user values (:meth:`__call__`). Picklable (the generated code is rebuilt)."""

    def __init__(self, net: Network, budget: Any, space: Any = None) -> None:
        device = budget.device_profile
        if device is None or device.kind != "gpu":
            raise ValueError("ReservedMemory: the budget needs a GPU device (Budget(device='a100-80gb'))")
        limit = budget.limits().get("memory")
        self.limit = int(limit if limit is not None else device.memory_bytes)
        self.device_memory = int(device.memory_bytes)
        self.config: AllocatorConfig = budget.allocator
        self.plan = allocation_plan(net, budget, device)
        self._footprint = self.plan.ref(footprint(net, device))
        self.uses = tuple(sorted(self.plan.variables()))
        self.space = space
        self._seen: dict[tuple[Any, ...], bool] = {}  # verdicts by configuration (searches repeat points)
        # what Problem.fingerprint reads of a predicate: the settings that change verdicts (the network,
        # footprint and limit are in the symbolic memory constraint next to it)
        self.__qualname__ = f"ReservedMemory(limit={self.limit}, steps={self.plan.steps}, {self.config})"

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_seen": {}}

    def simulate(self, env: Any) -> GpuMemory:
        """Simulate the encoded configuration ``env`` (``{variable: encoded value}``)."""
        vals = self.plan.values(env)
        fp = int(vals[self._footprint])
        capacity = max(0, self.limit - fp)
        allocator = CachingAllocator(capacity, self.config, total=max(0, self.device_memory - fp))
        failed = self.plan.replay(vals, allocator)
        r = allocator.result()
        return GpuMemory(fp, r.peak_reserved, r.peak_allocated, capacity, failed is None, failed)

    def encode(self, config: Any) -> dict[str, Any]:
        """The encoded values of the variables the sequence reads, from a configuration of user values
        (a parameter missing from ``config``, e.g. an inactive one, takes its first value)."""
        if self.space is None:
            return {name: config[name] for name in self.uses}
        env: dict[str, Any] = {}
        for name in self.uses:
            value = config.get(name)
            p = self.space[name]
            env[name] = p.encoded()[0].item() if value is None else p.encode(value)
        return env

    def __call__(self, config: Any) -> bool:
        """Whether the configuration (user values) runs without an out-of-memory error (remembered: the
        last :data:`CACHE` configurations)."""
        env = self.encode(config)
        key = tuple(env.values())
        fits = self._seen.get(key)
        if fits is None:
            if len(self._seen) >= CACHE:
                self._seen.clear()
            fits = self._seen[key] = self.simulate(env).fits
        return fits
