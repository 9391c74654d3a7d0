"""Validity of convolutions follows the real CPU kernels, not PyTorch's ``meta`` kernels.

Over seeded samples of small odd configurations (asymmetric kernels, strides, paddings, output
paddings, dilations, groups; negative and oversized values included) of ``Conv1d/2d/3d`` and
``ConvTranspose1d/2d``: dnnsat's network (plain ints: a :class:`GraphError` at build time is
"invalid") is valid exactly when the CPU kernel runs into a non-empty tensor, of the shape dnnsat
predicts. The ``meta`` kernels differ both ways (pinned below, so a PyTorch upgrade that changes them
shows here): they run a transposed convolution whose output padding is at or above both its stride
and its dilation, and one with a negative padding (the CPU kernel raises; dnnsat says invalid), and
they raise on a transposed convolution whose every output size is 0 (the CPU kernel returns an empty
tensor on oneDNN's path or raises on the native one, depending on threads; dnnsat asks for non-empty
tensors, so it says invalid as the ``meta`` kernel does).
"""

from __future__ import annotations

import random
import warnings
from collections import Counter
from typing import Any

import pytest

from dnnsat.graph import GraphError, Network

torch = pytest.importorskip("torch")
F = pytest.importorskip("torch.nn.functional")

Config = dict[str, Any]


def sample(nd: int, transposed: bool, n: int, seed: int) -> list[Config]:
    rng = random.Random(seed)

    def dims(lo: int, hi: int) -> tuple[int, ...]:
        return tuple(rng.randint(lo, hi) for _ in range(nd))

    out = []
    for _ in range(n):
        g = rng.choice((1, 1, 2, 3))
        cfg = {
            "groups": g, "cin": g * rng.randint(1, 2), "cout": g * rng.randint(1, 2) + rng.choice((0, 0, 1)),
            "size": dims(1, 6), "kernel": dims(0, 4), "stride": dims(1, 4), "padding": dims(-1, 4),
            "dilation": dims(1, 3),
        }  # fmt: skip
        if transposed:
            cfg["output_padding"] = dims(0, 4)
        out.append(cfg)
    return out


def run(device: str, nd: int, transposed: bool, c: Config) -> tuple[int, ...] | None:
    """The output shape of the module (``nn.ConvNd`` / ``nn.ConvTransposeNd``) built and run on
    ``device``, or ``None`` when building or the forward raises or the output is empty."""
    kw = {"stride": c["stride"], "padding": c["padding"], "dilation": c["dilation"], "groups": c["groups"]}
    try:
        if transposed:
            cls = getattr(torch.nn, f"ConvTranspose{nd}d")
            mod = cls(
                c["cin"], c["cout"], c["kernel"], output_padding=c["output_padding"], device=device, **kw
            )
        else:
            mod = getattr(torch.nn, f"Conv{nd}d")(c["cin"], c["cout"], c["kernel"], device=device, **kw)
        y = mod(torch.zeros(2, c["cin"], *c["size"], device=device))
    except Exception:  # PyTorch rejects the configuration (ValueError, RuntimeError, ZeroDivisionError)
        return None
    return tuple(y.shape) if y.numel() else None


def dnnsat_shape(nd: int, transposed: bool, c: Config) -> tuple[int, ...] | None:
    net = Network("conv")
    x = net.input((2, c["cin"], *c["size"]))
    kw = {"stride": c["stride"], "padding": c["padding"], "dilation": c["dilation"], "groups": c["groups"]}
    try:
        if transposed:
            y = getattr(net, f"conv_transpose{nd}d")(
                x, c["cout"], c["kernel"], output_padding=c["output_padding"], **kw
            )
        else:
            y = getattr(net, f"conv{nd}d")(x, c["cout"], c["kernel"], **kw)
    except GraphError:
        return None
    return tuple(d.value for d in y.shape)


@pytest.mark.parametrize(
    ("nd", "transposed"), [(1, False), (2, False), (3, False), (1, True), (2, True), (3, True)], ids=str
)
def test_validity_is_the_cpu_kernels(nd: int, transposed: bool) -> None:
    verdicts: Counter[tuple[bool, bool]] = Counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # empty-output and deprecation warnings of the kernels
        for c in sample(nd, transposed, 1600 if nd == 3 and transposed else 800, seed=nd + 10 * transposed):
            cpu = run("cpu", nd, transposed, c)
            assert dnnsat_shape(nd, transposed, c) == cpu, c
            verdicts[cpu is not None, run("meta", nd, transposed, c) is not None] += 1
    assert verdicts[True, True] > 40 and verdicts[False, False] > 40  # both outcomes well covered
    if transposed:  # the meta kernel accepts what the CPU one rejects (output padding, negative padding)
        assert verdicts[False, True] > 20
    assert verdicts[True, False] == 0  # no non-empty CPU result that meta rejects


def test_meta_kernel_differences() -> None:
    """The differences named in the module docstring, on one configuration each."""
    for device in ("cpu", "meta"):  # output padding 2 >= stride 2 and >= dilation 1
        x, w = torch.zeros(2, 2, 3, 3, device=device), torch.zeros(2, 2, 3, 3, device=device)
        if device == "cpu":
            with pytest.raises(RuntimeError, match="output padding must be smaller"):
                F.conv_transpose2d(x, w, stride=2, output_padding=2)
        else:
            assert F.conv_transpose2d(x, w, stride=2, output_padding=2).shape == (2, 2, 9, 9)
    net = Network("conv")
    with pytest.raises(GraphError, match="output_padding smaller than stride or dilation"):
        net.conv_transpose2d(net.input((2, 2, 3, 3)), 2, 3, stride=2, output_padding=2)
    # every output size (2 - 1) * 1 - 2 * 1 + 1 * (1 - 1) + 0 + 1 = 0: the CPU gives an empty tensor
    # (oneDNN's path, taken with more than one thread) or raises (the native path, one thread), meta raises
    x, w = torch.zeros(2, 2, 2, 2), torch.zeros(2, 2, 1, 1)
    threads = torch.get_num_threads()
    try:
        for n in (1, 2):
            torch.set_num_threads(n)
            try:
                assert F.conv_transpose2d(x, w, padding=1).shape == (2, 2, 0, 0)
            except RuntimeError as err:
                assert "Output size is too small" in str(err)
    finally:
        torch.set_num_threads(threads)
    with pytest.raises(RuntimeError, match="Output size is too small"):
        F.conv_transpose2d(x.to("meta"), w.to("meta"), padding=1)
    with pytest.raises(GraphError, match="output size is positive"):
        net.conv_transpose2d(net.input((2, 2, 2, 2)), 2, 1, padding=1)
