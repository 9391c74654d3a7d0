"""The CUDA caching-allocator simulation, the allocation sequence of a step, the GPU footprint and the
per-configuration GPU memory check.

Each allocator test is a sequence whose outcome follows from one rule of
``c10/cuda/CUDACachingAllocator.cpp`` (torch 2.x, ``DeviceCachingAllocator``), named in the test.
"""

from __future__ import annotations

import pickle
from dataclasses import dataclass

import pytest

import dnnsat as ds
from dnnsat import zoo
from dnnsat.cost import Budget, get_device
from dnnsat.cost.memory import (
    AllocatorConfig,
    CachingAllocator,
    ReservedMemory,
    allocation_plan,
    cublas_workspace,
    footprint,
    memory_expressions,
    round_size,
    simulate,
)
from dnnsat.cost.memory._allocator import allocation_size
from dnnsat.expr import Var, compile_scalar
from dnnsat.graph import Network, encode_config

KiB, MiB = 1 << 10, 1 << 20
MEM_KEYS = ("memory", "memory_overhead")


def free(i: int) -> int:
    """The event freeing what event ``i`` allocated."""
    return -i - 1


# -- sizes -------------------------------------------------------------------------------------------


def test_round_size_512_byte_blocks_and_power2_divisions() -> None:
    # round_size: below kMinBlockSize -> 512; else a multiple of 512
    assert [round_size(n) for n in (1, 512, 513, 1200 * KiB + 1)] == [512, 512, 1024, 1200 * KiB + 512]
    # roundup_power2_next_division: 1200 KiB lies in [1 MiB, 2 MiB), 4 divisions of 256 KiB -> 1280 KiB
    assert round_size(1200 * KiB, 4) == 1280 * KiB
    assert round_size(1 * MiB, 4) == 1 * MiB  # a power of 2 stays
    assert round_size(1500, 4) == 1536  # not above 512 x divisions: 512-byte rounding


def test_get_allocation_size_segments() -> None:
    # get_allocation_size: <= kSmallSize: kSmallBuffer; < kMinLargeAlloc: kLargeBuffer; else 2 MiB multiples
    assert allocation_size(512) == allocation_size(MiB) == 2 * MiB
    assert allocation_size(MiB + 512) == allocation_size(10 * MiB - 512) == 20 * MiB
    assert allocation_size(10 * MiB) == 10 * MiB and allocation_size(10 * MiB + 512) == 12 * MiB
    r = simulate([12 * MiB + 1])
    assert (r.peak_reserved, r.peak_allocated, r.segments) == (14 * MiB, 12 * MiB + 512, 1)


# -- pools, best fit, splitting, merging ---------------------------------------------------------------


def test_small_requests_share_2mib_segments() -> None:
    # get_pool (<= 1 MiB: small pool) + should_split (small pool: remaining >= 512 bytes)
    r = simulate([512 * KiB] * 4)
    assert (r.peak_reserved, r.segments) == (2 * MiB, 1)
    r = simulate([512 * KiB] * 5)
    assert (r.peak_reserved, r.segments) == (4 * MiB, 2)


def test_large_pool_splits_only_above_1mib_remaining() -> None:
    # should_split (large pool): the rest becomes a free block only if it is > kSmallSize
    r = simulate([19 * MiB, 2 * MiB])  # 20 MiB segment, 1 MiB left: not split -> the 2 MiB needs its own
    assert (r.peak_allocated, r.peak_reserved, r.segments) == (22 * MiB, 40 * MiB, 2)
    r = simulate([2 * MiB, 2 * MiB])  # 20 MiB segment split: the second 2 MiB fits in its rest
    assert (r.peak_allocated, r.peak_reserved, r.segments) == (4 * MiB, 20 * MiB, 1)


def test_best_fit_takes_the_smallest_block_that_fits() -> None:
    # get_free_block: lower_bound over (size, address) -> the 30 MiB block for 25 MiB, the 40 for 35
    events = [30 * MiB, 40 * MiB, free(0), free(1), 25 * MiB, 35 * MiB]
    r = simulate(events)
    assert (r.peak_reserved, r.segments) == (70 * MiB, 2)
    # had 25 MiB taken the 40 MiB block, 35 MiB would need a third segment
    r = simulate([30 * MiB, 40 * MiB, free(0), free(1), 25 * MiB, 35 * MiB, 38 * MiB])
    assert r.segments == 3 and r.peak_reserved == 108 * MiB


def test_freed_blocks_merge_with_free_neighbours() -> None:
    # free_block / try_merge_blocks: two 2 MiB blocks and the rest of their 20 MiB segment merge again
    r = simulate([2 * MiB, 2 * MiB, free(0), free(1), 19 * MiB])
    assert (r.peak_reserved, r.segments) == (20 * MiB, 1)
    # one of them still allocated: 16 MiB + 2 MiB free but not adjacent -> a new segment for 19 MiB
    r = simulate([2 * MiB, 2 * MiB, free(0), 19 * MiB])
    assert (r.peak_reserved, r.segments) == (40 * MiB, 2)


def test_cached_blocks_stay_reserved_when_the_next_request_is_larger() -> None:
    # malloc: no cached block fits -> alloc_block (cudaMalloc); the freed 30 MiB stays cached
    r = simulate([30 * MiB, free(0), 40 * MiB])
    assert (r.peak_allocated, r.peak_reserved) == (40 * MiB, 70 * MiB)


# -- running out of memory -----------------------------------------------------------------------------


def test_release_cached_blocks_and_retry_before_oom() -> None:
    # malloc: alloc_block fails -> release_cached_blocks (every unsplit cached segment) -> retry
    r = simulate([30 * MiB, free(0), 40 * MiB], capacity=50 * MiB)
    assert r.fits and (r.peak_reserved, r.reserved) == (40 * MiB, 40 * MiB)
    r = simulate([30 * MiB, free(0), 40 * MiB], capacity=39 * MiB)
    assert r.oom and (r.oom_event, r.oom_request) == (2, 40 * MiB) and r.peak_reserved == 30 * MiB


def test_split_segments_are_not_released() -> None:
    # release_blocks frees only blocks with no prev/next: a segment with a live block stays
    live = [2 * MiB, 30 * MiB]  # the 2 MiB block splits its 20 MiB segment
    assert simulate(live, capacity=40 * MiB).oom
    assert simulate([2 * MiB, free(0), 30 * MiB], capacity=40 * MiB).fits  # merged back: released


def test_max_split_size_keeps_oversize_blocks_whole() -> None:
    cfg = AllocatorConfig(max_split_size_mb=25)
    # get_free_block: a request below max_split_size never takes an oversize (>= 25 MiB) cached block
    assert simulate([30 * MiB, free(0), 10 * MiB], config=cfg).peak_reserved == 40 * MiB
    assert simulate([30 * MiB, free(0), 10 * MiB]).peak_reserved == 30 * MiB  # default: split
    # an oversize request takes an oversize block only below request + max_non_split_rounding (20 MiB)
    assert simulate([60 * MiB, free(0), 50 * MiB], config=cfg).peak_reserved == 60 * MiB
    assert simulate([60 * MiB, free(0), 30 * MiB], config=cfg).peak_reserved == 90 * MiB
    wide = AllocatorConfig(max_split_size_mb=25, max_non_split_rounding_mb=40)
    assert simulate([60 * MiB, free(0), 30 * MiB], config=wide).peak_reserved == 60 * MiB


def test_release_available_cached_blocks_frees_an_oversize_block() -> None:
    # release_available_cached_blocks: with max_split_size, the smallest unsplit oversize cached block
    # that covers the request is freed, then alloc_block retries
    cfg = AllocatorConfig(max_split_size_mb=25)
    r = simulate([60 * MiB, free(0), 30 * MiB], capacity=80 * MiB, config=cfg)
    assert r.fits and (r.peak_reserved, r.reserved) == (60 * MiB, 30 * MiB)


def test_garbage_collection_under_a_memory_fraction() -> None:
    # garbage_collect_cached_blocks: reserved 40 MiB > 0.3 x 100 MiB allowed -> the cached 40 MiB
    # segment is freed before cudaMalloc; without it both stay reserved
    gc = AllocatorConfig(memory_fraction=0.5, garbage_collection_threshold=0.3)
    events = [40 * MiB, free(0), 50 * MiB]
    assert simulate(events, capacity=200 * MiB, config=gc).peak_reserved == 50 * MiB
    plain = AllocatorConfig(memory_fraction=0.5)
    assert simulate(events, capacity=200 * MiB, config=plain).peak_reserved == 90 * MiB
    # alloc_block: above the fraction's allowance (100 MiB of 200) cudaMalloc is refused
    assert simulate([60 * MiB, 50 * MiB], capacity=200 * MiB, config=plain).oom
    assert simulate([60 * MiB, 50 * MiB], capacity=90 * MiB, total=200 * MiB, config=plain).oom


def test_expandable_segments_grow_one_segment_by_pages() -> None:
    cfg = AllocatorConfig(expandable_segments=True)
    # try_allocate_expandable_block / map_block: 20 MiB pages in the large pool; the freed 40 MiB tail
    # serves the next request instead of a new segment
    r = simulate([30 * MiB, free(0), 40 * MiB], config=cfg)
    assert (r.peak_reserved, r.peak_allocated) == (40 * MiB, 40 * MiB)
    r = simulate([30 * MiB, 50 * MiB], config=cfg)  # 40 MiB mapped, 10 free at the tail + 40 more
    assert r.peak_reserved == 80 * MiB
    r = simulate([100 * KiB, 1 * MiB, 1 * MiB], config=cfg)  # small pool: 2 MiB pages
    assert r.peak_reserved == 4 * MiB
    # release_cached_blocks unmaps the large segment's free pages: the small pool's page then fits
    r = simulate([60 * MiB, free(0), 1 * MiB], capacity=61 * MiB, config=cfg)
    assert r.fits and (r.peak_reserved, r.reserved) == (60 * MiB, 2 * MiB)
    # a live block keeps its page mapped: 2 MiB live in the first 20 MiB page, 18 MiB free after it
    r = simulate([50 * MiB, free(0), 2 * MiB, 70 * MiB], capacity=79 * MiB, config=cfg)
    assert r.oom and r.reserved == 20 * MiB


def test_roundup_power2_divisions_in_malloc() -> None:
    a = CachingAllocator(config=AllocatorConfig(roundup_power2_divisions=4))
    a.malloc(1200 * KiB)
    assert a.allocated == 1280 * KiB


# -- settings ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "name"),
    [
        (dict(max_split_size_mb=10), "max_split_size_mb"),
        (dict(max_non_split_rounding_mb=1), "max_non_split_rounding_mb"),
        (dict(garbage_collection_threshold=1.5, memory_fraction=0.5), "garbage_collection_threshold"),
        (dict(garbage_collection_threshold=0.5), "memory_fraction"),
        (dict(memory_fraction=0.0), "memory_fraction"),
        (dict(roundup_power2_divisions=3), "roundup_power2_divisions"),
        (dict(expandable_segments="yes"), "expandable_segments"),
    ],
)
def test_invalid_settings_name_the_option(kwargs: dict, name: str) -> None:  # type: ignore[type-arg]
    with pytest.raises(ValueError, match=name):
        AllocatorConfig(**kwargs)


def test_settings_parse_like_pytorch_cuda_alloc_conf() -> None:
    cfg = AllocatorConfig.parse(
        "expandable_segments:True, max_split_size_mb:128;garbage_collection_threshold:0.6,memory_fraction:0.9"
    )
    assert cfg == AllocatorConfig(True, 128, 20, 0.6, 0.9, 0)
    with pytest.raises(ValueError, match="unknown allocator option 'backend'"):
        AllocatorConfig.parse("backend:cudaMallocAsync")
    with pytest.raises(ValueError, match="expandable_segments"):
        AllocatorConfig.parse("expandable_segments:yes")
    b = Budget.parse("device=a100-40gb,allocator=expandable_segments:True;max_split_size_mb:64")
    assert b.allocator == AllocatorConfig(expandable_segments=True, max_split_size_mb=64)
    assert (
        Budget(device="a100-40gb", allocator={"max_split_size_mb": 64}).allocator.max_split_size == 64 * MiB
    )
    with pytest.raises(ValueError, match="GPU device"):
        Budget(allocator="expandable_segments:True")
    with pytest.raises(ValueError, match="Budget: allocator: .*max_split_size_mb"):
        Budget(device="a100-40gb", allocator="max_split_size_mb:8")
    with pytest.raises(ValueError, match="simulate"):
        Budget(device="a100-40gb", simulate="no")  # type: ignore[arg-type]


# -- footprint -----------------------------------------------------------------------------------------


def test_footprint_counts_the_libraries_a_configuration_loads() -> None:
    dev = get_device("a100-40gb")
    lib = dev.libraries
    net = Network()
    x = net.input((Var("b"), 3, 8, 8))
    y = net.branch(
        [(Var("conv") == 1, lambda x: net.conv2d(x, 3, 3, padding=1)), (Var("conv") == 0, net.relu)], x
    )
    net.output(net.linear(net.flatten(y), 10))
    fp = compile_scalar([footprint(net, dev), cublas_workspace(net, dev)])
    assert fp({"b": 2, "conv": 1}) == (dev.context_bytes + lib["cublas"] + lib["cudnn"], 8519680)
    assert fp({"b": 2, "conv": 0}) == (dev.context_bytes + lib["cublas"], 8519680)
    assert get_device("h100").cublas_workspace_bytes == 32 * MiB  # Hopper: 32 MiB
    assert footprint(net, get_device("cpu")).value == 0
    # _select_batch_norm_backend: cuDNN only for inputs of 3+ dimensions (BatchNorm1d after a linear
    # layer runs PyTorch's own kernel; GPUMemNet's A100 MLPs with and without it measure the same)
    mlp = Network()
    mlp.output(mlp.batchnorm(mlp.linear(mlp.input((8, 16)), 4)))
    assert compile_scalar([footprint(mlp, dev)])({}) == (dev.context_bytes + lib["cublas"],)
    cnn = Network()
    cnn.output(cnn.batchnorm(cnn.input((8, 3, 4, 4))))
    assert compile_scalar([footprint(cnn, dev)])({}) == (dev.context_bytes + lib["cudnn"],)


# -- the allocation sequence of a step -----------------------------------------------------------------


@dataclass(frozen=True)
class _Gpu:
    kind: str = "gpu"
    context_bytes: int = 0
    memory_bytes: int = 80 * 2**30


@pytest.mark.parametrize("family", ["mlp", "cnn", "gpt"])
@pytest.mark.parametrize(
    "kw", [dict(optimizer="adam"), dict(optimizer="sgd"), dict(mode="inference"), dict(dtype="mixed")]
)
def test_sequence_peak_reproduces_the_symbolic_allocation_peak(family: str, kw: dict) -> None:  # type: ignore[type-arg]
    """Replaying the sequence allocates at least the symbolic allocation peak and at most 2 % more than
    the symbolic GPU memory (which adds the largest cuDNN workspace to the peak; the sequence has each
    convolution's at its own moment)."""
    p = getattr(zoo, family)()
    budget = Budget(**kw)
    exprs = memory_expressions(p.network, budget, _Gpu())
    peak = compile_scalar([exprs["memory"] - exprs["memory_overhead"], exprs["memory"]])
    plan = allocation_plan(p.network, budget, _Gpu())
    for cfg in p._sample_decomposed(4, seed=5):  # the configurations this test was written for
        env = encode_config(p.space, cfg)
        a = CachingAllocator()
        assert plan.replay(plan.values(env), a) is None
        lower, upper = peak(env)
        assert lower <= a.peak_allocated <= 1.02 * upper, (cfg, lower, upper, a.peak_allocated)


def test_sequence_of_a_tiny_mlp_step() -> None:
    """x (4, 8) -> linear 16 -> relu -> linear 4, Adam: 212 parameters; weights, Adam state, batch and
    targets stay; in a fresh process the first step creates the state (4 + 4 tensors)."""
    net = Network()
    x = net.input((4, 8))
    net.output(net.linear(net.relu(net.linear(x, 16)), 4))
    plan = allocation_plan(net, Budget(optimizer="adam"), _Gpu())
    a = CachingAllocator()
    assert plan.replay(plan.values({}), a) is None
    # every tensor is < 1 MiB: one 2 MiB small-pool segment holds the whole step
    assert (a.peak_reserved, a.segments) == (2 * MiB, 1)
    # at the end: 4 weights + 8 Adam states + batch + targets in 512-byte blocks (the gradients go with
    # the next zero_grad, which the sequence puts at the end of a step)
    assert a.allocated == (4 + 8 + 2) * 512
    # the peak: those + 4 gradients + the foreach Adam temporaries (4) + output + loss scalars (2)
    assert a.peak_allocated == (4 + 8 + 2 + 4 + 4 + 1 + 2) * 512


def test_sequence_rejects_checkpointing() -> None:
    with pytest.raises(ValueError, match="checkpointing"):
        allocation_plan(zoo.gpt().network, Budget(checkpoint=True), _Gpu())


# -- the budget: per-configuration check -------------------------------------------------------------


def test_gpu_budget_checks_the_simulated_reserved_peak() -> None:
    budget = Budget(device="a100-40gb", optimizer="adam", memory="3GiB", simulate=True)
    p = zoo.cnn(budget=budget)
    names = [c.name for c in p.constraints]
    assert names[-2:] == ["memory", "memory_reserved"]
    check = p.gpu_memory  # type: ignore[attr-defined]
    cfgs = zoo.cnn().sample(40, seed=1)
    verdicts = []
    for cfg in cfgs:
        sim = check.simulate(check.encode(cfg))
        lower = p.costs(cfg)["memory"]
        assert sim.footprint >= get_device("a100-40gb").context_bytes
        # the symbolic memory is a lower bound of footprint + reserved (up to one cuDNN workspace)
        if sim.fits:
            assert lower <= sim.total + 64 * MiB
            assert sim.total <= 3 * 2**30
        verdicts.append(sim.fits)
        assert check(cfg) == sim.fits
    assert any(verdicts) and not all(verdicts)
    # pickling drops generated code and remembered verdicts; the copy decides the same
    clone = pickle.loads(pickle.dumps(check))
    assert [clone(c) for c in cfgs[:5]] == verdicts[:5]


def test_allocator_settings_change_the_verdict() -> None:
    """A CNN whose freed activations do not fit its next, larger ones: the caching allocator reserves
    more than it allocates; expandable segments reserve less."""
    cfg = {"batch_size": 64, "convs": 2, "fc": 256, "kernel": 3, "padding": 1, "resolution": 64,
           "w0": 32, "w1": 64, "w2": 128, "w3": 256}  # fmt: skip
    base = Budget(device="a100-40gb", optimizer="adam")
    plain = ReservedMemory(zoo.cnn().network, base, zoo.cnn().space).simulate(
        encode_config(zoo.cnn().space, cfg)
    )
    exp = Budget(device="a100-40gb", optimizer="adam", allocator="expandable_segments:True")
    grown = ReservedMemory(zoo.cnn().network, exp, zoo.cnn().space).simulate(
        encode_config(zoo.cnn().space, cfg)
    )
    assert plain.peak_reserved > plain.peak_allocated
    assert grown.peak_reserved < plain.peak_reserved
    assert plain.peak_allocated == grown.peak_allocated
    # a limit between the allocated and the reserved peak: the default allocator still fits by
    # releasing its cache before failing (release_cached_blocks), capacity permitting
    tight = Budget(
        device="a100-40gb", optimizer="adam", memory=plain.footprint + plain.peak_allocated + 64 * MiB
    )
    squeezed = ReservedMemory(zoo.cnn().network, tight, zoo.cnn().space).simulate(
        encode_config(zoo.cnn().space, cfg)
    )
    assert squeezed.peak_reserved <= squeezed.capacity
    too_tight = Budget(
        device="a100-40gb", optimizer="adam", memory=plain.footprint + plain.peak_allocated // 2
    )
    assert (
        not ReservedMemory(zoo.cnn().network, too_tight, zoo.cnn().space)
        .simulate(encode_config(zoo.cnn().space, cfg))
        .fits
    )


def test_simulation_is_optional_and_skipped_where_it_does_not_apply() -> None:
    names = [c.name for c in zoo.mlp(budget=Budget(device="t4")).constraints]  # off by default
    assert "memory" in names and "memory_reserved" not in names
    names = [c.name for c in zoo.gpt(budget=Budget(device="t4", checkpoint=True, simulate=True)).constraints]
    assert "memory" in names and "memory_reserved" not in names
    names = [c.name for c in zoo.mlp(budget=Budget(memory="1GiB")).constraints]  # no device: CPU model
    assert "memory_reserved" not in names


def test_problem_samples_only_configurations_that_fit() -> None:
    p = zoo.mlp(budget=Budget(device="a100-40gb", optimizer="adam", memory="1500MiB", simulate=True))
    for cfg in p.sample(10, seed=0):
        assert p.gpu_memory.simulate(p.gpu_memory.encode(cfg)).fits  # type: ignore[attr-defined]
        assert p.check(cfg).feasible
    assert isinstance(p, ds.Problem)


def test_symbolic_gpu_memory_adds_the_footprint_and_the_cublas_workspace() -> None:
    """The symbolic bound on a GPU: context + the libraries the network uses + (allocation peak + cuBLAS
    workspace) in 2 MiB segments (``memory_expressions``)."""
    net = Network()
    x = net.input((4, 8))
    net.output(net.linear(net.relu(net.linear(x, 16)), 4))
    dev = get_device("a100-40gb")
    budget = Budget(optimizer="adam")
    gpu = dict(zip(MEM_KEYS, compile_scalar([memory_expressions(net, budget, dev)[k] for k in MEM_KEYS])({})))
    stand_in = dict(
        zip(MEM_KEYS, compile_scalar([memory_expressions(net, budget, _Gpu())[k] for k in MEM_KEYS])({}))
    )
    alloc = stand_in["memory"] - stand_in["memory_overhead"]  # the allocation peak: 25 blocks of 512 bytes
    assert alloc == 25 * 512
    segments = -(-(alloc + dev.cublas_workspace_bytes) // (2 * MiB)) * 2 * MiB
    assert gpu["memory"] == dev.context_bytes + dev.libraries["cublas"] + segments
    assert gpu["memory"] - gpu["memory_overhead"] == alloc


def test_gpumemnet_rows_rebuild_with_their_parameter_counts() -> None:
    """benchmarks/gpumemnet.py rebuilds GPUMemNet's MLP rows layer by layer: the parameter count of a
    rebuilt row equals the dataset's ``Total Parameters`` (343 -> Mish -> 15 -> softmax: 123,152)."""
    from benchmarks.gpumemnet import build_mlp

    row = {
        "Filename": "input:343_output:15_depth:1_arch:uniform_batch:451_act:mish.out",
        "Activations-Params": "[('linear', 343, 117992), ('Mish', 343, 0), ('linear', 15, 5160), "
        "('Softmax', 15, 0)]",
        "Batch Size": "451",
    }
    net = build_mlp(row)
    assert compile_scalar([net.costs()["params"]])({}) == (123152,)
    assert [n.op for n in net.ops()] == ["input", "linear", "mish", "linear", "softmax"]
    with pytest.raises(ValueError, match="Conv2d"):
        build_mlp({**row, "Activations-Params": "[('Conv2d', 3, 0)]"})


def test_allocator_settings_change_the_problem_fingerprint() -> None:
    """Caches keyed by Problem.fingerprint (Optuna's pruning record) must not mix allocator settings."""
    plain = zoo.mlp(budget=Budget(device="a100-40gb", memory="2GiB", simulate=True)).fingerprint()
    expandable = Budget(
        device="a100-40gb", memory="2GiB", allocator="expandable_segments:True", simulate=True
    )
    assert zoo.mlp(budget=expandable).fingerprint() != plain
    assert zoo.mlp(budget=Budget(device="a100-40gb", memory="2GiB", simulate=True)).fingerprint() == plain
