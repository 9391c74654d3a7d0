"""A simulation of PyTorch's CUDA caching allocator (``c10/cuda/CUDACachingAllocator.cpp``, torch 2.x).

:func:`simulate` replays a sequence of tensor allocations and frees (bytes) through the allocator's
rules and returns the peak *reserved* memory (what ``torch.cuda.max_memory_reserved`` reports: the
segments taken from ``cudaMalloc``) and whether the sequence runs without an out-of-memory error in
``capacity`` bytes. Every rule names the function of ``DeviceCachingAllocator`` it follows, read from
torch 2.x sources (``CUDACachingAllocator.cpp`` at pytorch commit 001074d and the settings parser
``c10/core/AllocatorConfig.cpp``; not diffed against the pinned 2.13 file, which no session could read):

* ``round_size``: a request is rounded up to a multiple of ``kMinBlockSize`` (512 bytes); with
  ``roundup_power2_divisions`` ``d`` (> 1), a request above ``512 * d`` bytes is rounded up to the next
  of ``d`` equal divisions of its power-of-2 interval (``roundup_power2_next_division``).
* ``get_pool``: requests up to ``kSmallSize`` (1 MiB) use the small pool, larger ones the large pool.
* ``get_allocation_size``: a new segment is 2 MiB (``kSmallBuffer``) for the small pool, 20 MiB
  (``kLargeBuffer``) for requests below 10 MiB (``kMinLargeAlloc``), else the request rounded up to
  2 MiB (``kRoundLarge``).
* ``get_free_block``: best fit, the smallest free block of the pool at least as large as the request
  (free blocks ordered by (stream, size, address): one stream here); a request below
  ``max_split_size`` never takes a block of at least ``max_split_size``, a larger one takes a block only
  when it is smaller than the request + ``max_non_split_rounding`` (20 MiB by default).
* ``should_split``: the rest of a block is split off as a free block when at least 512 bytes remain in
  the small pool (or with expandable segments); in the large pool when the request is below
  ``max_split_size`` and more than 1 MiB (``kSmallSize``) remains.
* ``free_block`` / ``try_merge_blocks``: a freed block merges with its free neighbours of the same
  segment.
* ``malloc``: no cached block fits -> garbage collection (``garbage_collect_cached_blocks``, only under
  a per-process memory fraction, as ``set_fraction`` gates it) -> ``alloc_block`` (a new segment; it fails
  when the segment does not fit in the memory left, or above the fraction's allowance) -> on failure
  ``release_available_cached_blocks`` (only with ``max_split_size``: frees unsplit oversize cached blocks,
  the smallest one that covers the request, else the largest ones first) and retry -> on failure
  ``release_cached_blocks`` (frees every unsplit cached segment of both pools) and retry -> else
  out of memory.
* ``garbage_collect_cached_blocks``: once reserved memory exceeds ``garbage_collection_threshold`` x
  the allowance, frees unsplit large-pool cached segments whose age (calls to ``get_free_block`` of the
  pool since they were cached) is at least the average age, until the excess is reclaimed.
* expandable segments (``try_allocate_expandable_block``, ``map_block``): each pool has one segment
  that grows by pages (2 MiB small pool, 20 MiB large pool) at its end; best fit skips the segment's
  tail block (which can grow) while a larger ordinary free block fits (``get_free_block``).
  Simplification: when memory runs out, only the free pages at the segment's tail are unmapped
  (``release_cached_blocks`` also unmaps interior free pages), so the simulation may report an
  out-of-memory slightly early (the safe side).

Not modelled: other streams (``recordStream``), CUDA graphs' private pools, ``cudaMallocAsync``.
Addresses are invented (new segments at increasing addresses): they only break ties between free
blocks of equal size. Cost: a few microseconds per event (pure Python).
"""

from __future__ import annotations

import math
from bisect import bisect_left, insort
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields
from typing import Any

__all__ = ["AllocatorConfig", "AllocatorResult", "CachingAllocator", "simulate", "round_size"]

MIB = 1 << 20
K_MIN_BLOCK = 512  # kMinBlockSize
K_SMALL_SIZE = MIB  # kSmallSize
K_SMALL_BUFFER = 2 * MIB  # kSmallBuffer
K_LARGE_BUFFER = 20 * MIB  # kLargeBuffer
K_MIN_LARGE_ALLOC = 10 * MIB  # kMinLargeAlloc
K_ROUND_LARGE = 2 * MIB  # kRoundLarge
_NO_SPLIT_LIMIT = 1 << 62  # max_split_size when unset (SIZE_MAX in torch)
# a free block's key in its pool's sorted list: size << _SHIFT | address (orders by size, then address)
_SHIFT = 56
_ADDRESS = (1 << _SHIFT) - 1


@dataclass(frozen=True)
class AllocatorConfig:
    """The caching allocator's settings users change to avoid out-of-memory errors.

    Mirrors ``PYTORCH_CUDA_ALLOC_CONF`` (``c10/core/AllocatorConfig.cpp``) and
    ``torch.cuda.set_per_process_memory_fraction``:

    * ``expandable_segments`` (bool): one growing segment per pool instead of one segment per
      ``cudaMalloc``;
    * ``max_split_size_mb`` (int >= 20, or None: unlimited): cached blocks of at least this size are
      never split, and smaller requests never take them;
    * ``max_non_split_rounding_mb`` (int >= 20, default 20): a request of at least ``max_split_size``
      takes an oversize cached block only when the block is smaller than the request + this;
    * ``garbage_collection_threshold`` (0 < t < 1, or None): reclaim cached segments when reserved
      memory exceeds ``t`` x the memory fraction's allowance; torch runs it only under a memory
      fraction, so it needs ``memory_fraction``;
    * ``memory_fraction`` (0 < f <= 1, or None): the process may reserve at most ``f`` x the device's
      memory (``set_per_process_memory_fraction``);
    * ``roundup_power2_divisions`` (0, 1 or a power of 2): round requests up to this many divisions
      per power-of-2 interval (one value for every size).
    """

    expandable_segments: bool = False
    max_split_size_mb: int | None = None
    max_non_split_rounding_mb: int = 20
    garbage_collection_threshold: float | None = None
    memory_fraction: float | None = None
    roundup_power2_divisions: int = 0

    def __post_init__(self) -> None:
        def bad(name: str, value: Any, need: str) -> ValueError:
            return ValueError(f"allocator option {name}={value!r}: {need}")

        if not isinstance(self.expandable_segments, bool):
            raise bad("expandable_segments", self.expandable_segments, "must be True or False")
        for name in ("max_split_size_mb", "max_non_split_rounding_mb"):
            v = getattr(self, name)
            if v is None and name == "max_split_size_mb":
                continue
            if isinstance(v, bool) or not isinstance(v, int) or v < K_LARGE_BUFFER // MIB:
                raise bad(name, v, "must be an int >= 20 (MiB; torch refuses smaller values)")
        t = self.garbage_collection_threshold
        if t is not None:
            if isinstance(t, bool) or not isinstance(t, int | float) or not 0 < t < 1:
                raise bad("garbage_collection_threshold", t, "must be a number with 0 < t < 1")
            if self.memory_fraction is None:
                raise bad(
                    "garbage_collection_threshold",
                    t,
                    "torch collects garbage only under a per-process memory fraction: set "
                    "memory_fraction too (torch.cuda.set_per_process_memory_fraction)",
                )
        f = self.memory_fraction
        if f is not None and (isinstance(f, bool) or not isinstance(f, int | float) or not 0 < f <= 1):
            raise bad("memory_fraction", f, "must be a number with 0 < f <= 1")
        d = self.roundup_power2_divisions
        if isinstance(d, bool) or not isinstance(d, int) or d < 0 or (d & (d - 1)):
            raise bad("roundup_power2_divisions", d, "must be 0 (off) or a power of 2")

    @property
    def max_split_size(self) -> int:
        """Bytes (``max_split_size_mb`` x 1 MiB; unlimited when unset)."""
        return _NO_SPLIT_LIMIT if self.max_split_size_mb is None else self.max_split_size_mb * MIB

    @classmethod
    def parse(cls, text: str) -> AllocatorConfig:
        """``"expandable_segments:True,max_split_size_mb:128"`` (``PYTORCH_CUDA_ALLOC_CONF`` syntax; items
        may also be separated by ``;``) plus ``memory_fraction:<f>``."""
        kwargs: dict[str, Any] = {}
        known = {f.name for f in fields(cls)}
        for item in filter(None, (s.strip() for s in text.replace(";", ",").split(","))):
            key, sep, value = (s.strip() for s in item.partition(":"))
            if not sep or not value:
                raise ValueError(
                    f"allocator option {item!r} must look like name:value (e.g. max_split_size_mb:128)"
                )
            if key not in known:
                raise ValueError(f"unknown allocator option {key!r}; known: {sorted(known)}")
            kwargs[key] = _parse_value(key, value)
        return cls(**kwargs)

    @classmethod
    def of(cls, value: Any) -> AllocatorConfig:
        """An AllocatorConfig from itself, ``None`` (defaults), a mapping of options or a string."""
        if value is None:
            return cls()
        if isinstance(value, cls):
            return value
        if isinstance(value, str):
            return cls.parse(value)
        if isinstance(value, Mapping):
            known = {f.name for f in fields(cls)}
            unknown = sorted(set(value) - known)
            if unknown:
                raise ValueError(f"unknown allocator option(s) {unknown}; known: {sorted(known)}")
            return cls(**value)
        raise TypeError(
            f"allocator must be a string such as 'expandable_segments:True', a dict or an AllocatorConfig, "
            f"got {type(value).__name__}"
        )


def _parse_value(key: str, value: str) -> Any:
    if key == "expandable_segments":
        if value not in ("True", "False"):
            raise ValueError(f"allocator option expandable_segments: expected True or False, got {value!r}")
        return value == "True"
    try:
        return float(value) if key in ("garbage_collection_threshold", "memory_fraction") else int(value)
    except ValueError:
        raise ValueError(f"allocator option {key}: {value!r} is not a number") from None


def round_size(size: int, divisions: int = 0) -> int:
    """Bytes the allocator hands out for a request of ``size`` bytes (``round_size``)."""
    if size < K_MIN_BLOCK:
        return K_MIN_BLOCK
    if divisions > 1 and size > K_MIN_BLOCK * divisions:
        if size & (size - 1) == 0:
            return size
        floor = 1 << (size.bit_length() - 1)
        step = floor // divisions
        return -(-size // step) * step
    return -(-size // K_MIN_BLOCK) * K_MIN_BLOCK


def allocation_size(size: int) -> int:
    """Bytes of the segment ``cudaMalloc`` gets for a rounded request (``get_allocation_size``)."""
    if size <= K_SMALL_SIZE:
        return K_SMALL_BUFFER
    if size < K_MIN_LARGE_ALLOC:
        return K_LARGE_BUFFER
    return -(-size // K_ROUND_LARGE) * K_ROUND_LARGE


@dataclass(frozen=True)
class AllocatorResult:
    """Outcome of a simulated sequence (bytes): ``peak_reserved`` (max of the reserved segments),
    ``peak_allocated`` (max of the allocated blocks), ``reserved`` at the end, ``oom``: whether a request
    failed (``oom_event``: its index in the sequence, ``oom_request``: its size; the simulation stops
    there), ``segments``: ``cudaMalloc`` calls (or expandable-segment mappings)."""

    peak_reserved: int
    peak_allocated: int
    reserved: int
    oom: bool
    segments: int
    oom_event: int | None = None
    oom_request: int | None = None

    @property
    def fits(self) -> bool:
        return not self.oom


class _Pool:
    """Free blocks of one pool, ordered by (size, address): ``get_free_block``'s set (int keys)."""

    __slots__ = ("small", "free", "calls", "tail", "base", "page")

    def __init__(self, small: bool) -> None:
        self.small = small
        self.free: list[int] = []
        self.calls = 0  # get_free_blocks_call_count (garbage collection ages)
        self.tail = -1  # expandable segments: address of the last block of the growing segment
        self.base = -1  # expandable segments: the segment's first address
        self.page = K_SMALL_BUFFER if small else K_LARGE_BUFFER  # expandable segments: mapping unit


class CachingAllocator:
    """The allocator's state; :meth:`malloc` / :meth:`free` by address. ``capacity``: bytes the device
    has for the allocator's segments (``None``: unlimited); ``config``: :class:`AllocatorConfig`;
    ``total``: the device's memory, which ``memory_fraction`` is a share of (default ``capacity``)."""

    def __init__(
        self, capacity: int | None = None, config: AllocatorConfig | None = None, total: int | None = None
    ) -> None:
        self.config = config or AllocatorConfig()
        c = self.config
        limit = math.inf if capacity is None else capacity
        self.gc = c.garbage_collection_threshold is not None and not c.expandable_segments
        self.allowed = 0  # bytes the memory fraction allows (0: no fraction)
        if c.memory_fraction is not None:
            base = capacity if total is None else total
            if base is None:
                raise ValueError("allocator option memory_fraction needs the device's memory (total=)")
            self.allowed = int(c.memory_fraction * base)
            limit = min(limit, self.allowed)
        self.limit = limit
        self.max_split = c.max_split_size
        self.rounding = c.max_non_split_rounding_mb * MIB
        self.divisions = c.roundup_power2_divisions
        self.expandable = c.expandable_segments
        # block address -> [size, allocated, prev address, next address, pool, gc base]
        self.blocks: dict[int, list[Any]] = {}
        self.small = _Pool(True)
        self.large = _Pool(False)
        self.reserved = 0
        self.allocated = 0
        self.peak_reserved = 0
        self.peak_allocated = 0
        self.segments = 0
        self._next_address = 1 << 40
        if c == AllocatorConfig():  # the defaults: the same rules without the branches they switch off
            self.malloc = self._malloc_default  # type: ignore[method-assign]
            self.free = self._free_default  # type: ignore[method-assign]

    # -- requests ------------------------------------------------------------------------------------
    def malloc(self, nbytes: int) -> int | None:
        """Address of a block for ``nbytes`` (``None``: out of memory)."""
        if self.divisions:
            size = round_size(nbytes, self.divisions)
        else:
            size = ((nbytes + 511) >> 9) << 9 if nbytes > 512 else 512
        pool = self.small if size <= K_SMALL_SIZE else self.large
        # get_free_block
        if self.gc:
            pool.calls += 1
        free = pool.free
        i = bisect_left(free, size << _SHIFT)
        addr = -1
        if i < len(free):
            key = free[i]
            if self.expandable and key & _ADDRESS == pool.tail and i + 1 < len(free):
                i += 1  # the tail can grow: a larger ordinary block fits better
                key = free[i]
            bsize = key >> _SHIFT
            if not (
                size < self.max_split <= bsize or (size >= self.max_split and bsize >= size + self.rounding)
            ):
                del free[i]
                addr = key & _ADDRESS
        if addr < 0:
            addr = self._new_block(pool, size)
            if addr < 0:
                return None
        blocks = self.blocks
        block = blocks[addr]
        remaining = block[0] - size
        if (
            remaining >= K_MIN_BLOCK
            if (pool.small or self.expandable)
            else (size < self.max_split and remaining > K_SMALL_SIZE)
        ):  # should_split
            rest = addr + size
            nxt = block[3]
            blocks[rest] = [remaining, False, addr, nxt, pool, pool.calls]
            if nxt >= 0:
                blocks[nxt][2] = rest
            block[0] = size
            block[3] = rest
            insort(free, remaining << _SHIFT | rest)
            if pool.tail == addr:
                pool.tail = rest
        block[1] = True
        self.allocated += block[0]
        if self.allocated > self.peak_allocated:
            self.peak_allocated = self.allocated
        return addr

    def free(self, addr: int) -> None:
        """Return the block at ``addr`` to its pool, merged with free neighbours (``free_block``)."""
        blocks = self.blocks
        block = blocks[addr]
        block[1] = False
        size = block[0]
        self.allocated -= size
        pool: _Pool = block[4]
        free = pool.free
        prev, nxt = block[2], block[3]
        if nxt >= 0:
            other = blocks[nxt]
            if not other[1]:  # [block next]
                del blocks[nxt]
                free.pop(bisect_left(free, other[0] << _SHIFT | nxt))
                size += other[0]
                if pool.tail == nxt:
                    pool.tail = addr
                nxt = block[3] = other[3]
                if nxt >= 0:
                    blocks[nxt][2] = addr
        if prev >= 0:
            other = blocks[prev]
            if not other[1]:  # [prev block]
                free.pop(bisect_left(free, other[0] << _SHIFT | prev))
                size += other[0]
                other[3] = nxt
                if nxt >= 0:
                    blocks[nxt][2] = prev
                del blocks[addr]
                if pool.tail == addr:
                    pool.tail = prev
                addr, block = prev, other
        block[0] = size
        block[5] = pool.calls
        insort(free, size << _SHIFT | addr)

    def _malloc_default(self, nbytes: int) -> int | None:
        """:meth:`malloc` under the default settings (no max_split_size, garbage collection, expandable
        segments or power-of-2 rounding)."""
        size = ((nbytes + 511) >> 9) << 9 if nbytes > 512 else 512
        small = size <= K_SMALL_SIZE
        pool = self.small if small else self.large
        free = pool.free
        i = bisect_left(free, size << _SHIFT)
        if i < len(free):
            addr = free.pop(i) & _ADDRESS
        else:
            addr = self._new_block(pool, size)
            if addr < 0:
                return None
        blocks = self.blocks
        block = blocks[addr]
        remaining = block[0] - size
        if remaining >= K_MIN_BLOCK if small else remaining > K_SMALL_SIZE:  # should_split
            rest = addr + size
            nxt = block[3]
            blocks[rest] = [remaining, False, addr, nxt, pool, 0]
            if nxt >= 0:
                blocks[nxt][2] = rest
            block[0] = size
            block[3] = rest
            insort(free, remaining << _SHIFT | rest)
        block[1] = True
        allocated = self.allocated = self.allocated + block[0]
        if allocated > self.peak_allocated:
            self.peak_allocated = allocated
        return addr

    def _free_default(self, addr: int) -> None:
        """:meth:`free` under the default settings (no expandable segment's tail to follow)."""
        blocks = self.blocks
        block = blocks[addr]
        block[1] = False
        size = block[0]
        self.allocated -= size
        free = block[4].free
        prev, nxt = block[2], block[3]
        if nxt >= 0:
            other = blocks[nxt]
            if not other[1]:
                del blocks[nxt]
                free.pop(bisect_left(free, other[0] << _SHIFT | nxt))
                size += other[0]
                nxt = block[3] = other[3]
                if nxt >= 0:
                    blocks[nxt][2] = addr
        if prev >= 0:
            other = blocks[prev]
            if not other[1]:
                free.pop(bisect_left(free, other[0] << _SHIFT | prev))
                size += other[0]
                other[3] = nxt
                if nxt >= 0:
                    blocks[nxt][2] = prev
                del blocks[addr]
                addr, block = prev, other
        block[0] = size
        insort(free, size << _SHIFT | addr)

    def result(self, oom_event: int | None = None, oom_request: int | None = None) -> AllocatorResult:
        """The figures so far (``oom_event``: the index of a request that failed)."""
        return AllocatorResult(
            self.peak_reserved,
            self.peak_allocated,
            self.reserved,
            oom_event is not None,
            self.segments,
            oom_event,
            oom_request,
        )

    # -- internals -----------------------------------------------------------------------------------
    def _new_block(self, pool: _Pool, size: int) -> int:
        """``alloc_block``, then the release-and-retry path of ``malloc``; -1: out of memory."""
        if self.gc:
            self._garbage_collect()
        addr = self._alloc_block(pool, size)
        oversize = self.max_split < _NO_SPLIT_LIMIT and not self.expandable  # expandable blocks are split
        if addr < 0 and oversize and self._release_available(pool, size):
            addr = self._alloc_block(pool, size)
        if addr < 0:
            self._release_cached()
            addr = self._alloc_block(pool, size)
        return addr

    def _alloc_block(self, pool: _Pool, size: int) -> int:
        if self.expandable:
            return self._expand(pool, size)
        nbytes = allocation_size(size)
        if self.reserved + nbytes > self.limit:
            return -1
        addr = self._next_address
        self._next_address += nbytes + K_LARGE_BUFFER  # segments are not contiguous
        self.blocks[addr] = [nbytes, False, -1, -1, pool, pool.calls]
        self._reserve(nbytes)
        return addr

    def _expand(self, pool: _Pool, size: int) -> int:
        """Grow the pool's segment at its end by whole pages (``try_allocate_expandable_block``)."""
        page = pool.page
        if self.config.memory_fraction is not None and self.reserved + allocation_size(size) > self.allowed:
            return -1  # alloc_block checks the fraction with the ordinary segment size
        tail = pool.tail
        last = self.blocks.get(tail)
        have = last[0] if last is not None and not last[1] else 0
        grow = -(-(size - have) // page) * page
        if self.reserved + grow > self.limit:
            return -1
        self._reserve(grow)
        if have:
            pool.free.pop(bisect_left(pool.free, have << _SHIFT | tail))
            last[0] += grow  # type: ignore[index]
            return tail
        addr = self._segment_end(pool)
        self.blocks[addr] = [grow, False, tail if last is not None else -1, -1, pool, pool.calls]
        if last is not None:
            last[3] = addr
        pool.tail = addr
        return addr

    def _segment_end(self, pool: _Pool) -> int:
        if pool.tail < 0:
            if pool.base < 0:
                pool.base = self._next_address
                self._next_address += 1 << 44  # a whole address range per expandable segment
            return pool.base
        return pool.tail + self.blocks[pool.tail][0]

    def _reserve(self, nbytes: int) -> None:
        self.reserved += nbytes
        self.segments += 1
        if self.reserved > self.peak_reserved:
            self.peak_reserved = self.reserved

    def _release(self, pool: _Pool, addr: int) -> None:
        """``release_block``: ``cudaFree`` of an unsplit cached segment."""
        size = self.blocks.pop(addr)[0]
        pool.free.pop(bisect_left(pool.free, size << _SHIFT | addr))
        self.reserved -= size

    def _release_available(self, pool: _Pool, size: int) -> bool:
        """``release_available_cached_blocks``: free unsplit oversize cached segments for ``size``."""
        key = max(size, self.max_split)
        free, blocks = pool.free, self.blocks
        for k in free[bisect_left(free, key << _SHIFT) :]:  # the smallest one that covers the request
            addr = k & _ADDRESS
            if blocks[addr][2] < 0 and blocks[addr][3] < 0:
                self._release(pool, addr)
                return True
        released = 0
        for k in reversed(list(free)):  # else the largest ones, until the request is covered
            bsize, addr = k >> _SHIFT, k & _ADDRESS
            if released >= key or bsize < self.max_split:
                break
            if blocks[addr][2] < 0 and blocks[addr][3] < 0:
                released += bsize
                self._release(pool, addr)
        return released >= key

    def _release_cached(self) -> None:
        """``release_cached_blocks``: free every unsplit cached segment (expandable: unmap the free
        pages at the segment's tail)."""
        for pool in (self.large, self.small):
            if self.expandable:
                self._unmap_tail(pool)
                continue
            for k in list(pool.free):
                b = self.blocks[k & _ADDRESS]
                if b[2] < 0 and b[3] < 0:
                    self._release(pool, k & _ADDRESS)

    def _unmap_tail(self, pool: _Pool) -> None:
        last = self.blocks.get(pool.tail)
        if last is None or last[1]:
            return
        start, page = pool.tail, pool.page
        first_page = pool.base + -(-(start - pool.base) // page) * page  # whole free pages only
        drop = start + last[0] - first_page
        if drop <= 0:
            return
        pool.free.pop(bisect_left(pool.free, last[0] << _SHIFT | start))
        self.reserved -= drop
        last[0] -= drop
        if last[0]:
            insort(pool.free, last[0] << _SHIFT | start)
        else:
            del self.blocks[start]
            prev = last[2]
            if prev >= 0:
                self.blocks[prev][3] = -1
            pool.tail = prev

    def _garbage_collect(self) -> None:
        """``garbage_collect_cached_blocks`` over the large pool."""
        threshold = int(self.config.garbage_collection_threshold * self.allowed)  # type: ignore[operator]
        if self.reserved <= threshold:
            return
        target = self.reserved - threshold
        pool, blocks = self.large, self.blocks
        unsplit = [
            k & _ADDRESS for k in pool.free if blocks[k & _ADDRESS][2] < 0 and blocks[k & _ADDRESS][3] < 0
        ]
        if not unsplit:
            return
        ages = {a: pool.calls - blocks[a][5] for a in unsplit}
        total, count, reclaimed = sum(ages.values()), len(unsplit), 0
        freed = True
        while reclaimed < target and freed and count > 0:
            average = total / count
            freed = False
            for k in list(pool.free):
                a = k & _ADDRESS
                if a in ages and ages[a] >= average:
                    freed = True
                    reclaimed += k >> _SHIFT
                    total -= ages.pop(a)
                    count -= 1
                    self._release(pool, a)


def simulate(
    events: Sequence[int],
    capacity: int | None = None,
    config: AllocatorConfig | None = None,
    total: int | None = None,
) -> AllocatorResult:
    """Replay ``events`` (``n >= 0``: allocate ``n`` bytes; ``-i - 1``: free what event ``i``
    allocated) on a fresh :class:`CachingAllocator` (``capacity``, ``config``, ``total``)."""
    a = CachingAllocator(capacity, config, total)
    live: dict[int, int] = {}
    for i, e in enumerate(events):
        if e >= 0:
            addr = a.malloc(e)
            if addr is None:
                return a.result(oom_event=i, oom_request=e)
            live[i] = addr
        else:
            a.free(live.pop(-e - 1))
    return a.result()
