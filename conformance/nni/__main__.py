"""``python -m conformance.nni``: NNI's built-in tuner test procedure with every tuner wrapped in DnnSATTuner.

Prints one line per tuner (checks run, passed, failed, not applicable), the failures, and the built-in
tuners and cases that do not apply (with the reason). Exit status 1 when a check fails.
``--bare`` runs the same procedure on the bare NNI tuners (how the supported/failing type tables were
checked against NNI 3.0); ``--tuner`` and ``--space`` select a part; ``-v`` lists every check.
"""

from __future__ import annotations

import argparse
import logging
import sys
import time
import warnings

from ._harness import NOT_APPLICABLE, TUNERS, Outcome, run_tuner, summary
from ._spaces import KINDS


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m conformance.nni", description=__doc__.splitlines()[0])
    parser.add_argument("--tuner", action="append", choices=[c.name for c in TUNERS], help="repeatable")
    parser.add_argument("--kind", action="append", choices=KINDS, help="problem kind (default: both)")
    parser.add_argument("--space", help="only search-space keys that start with this")
    parser.add_argument("--bare", action="store_true", help="run the bare NNI tuners instead")
    parser.add_argument("-v", "--verbose", action="store_true", help="list every check")
    args = parser.parse_args(argv)
    warnings.simplefilter("ignore")  # NNI's TPE divides by zero on one-value ranges (it copes)
    logging.disable(logging.CRITICAL)  # NNI's tuners log every proposal (and their own errors): the table
    # is the output; a failure's message is in it
    kinds: list[str | None] = [None] if args.bare else list(args.kind or KINDS)
    cases = [c for c in TUNERS if not args.tuner or c.name in args.tuner]
    out: list[Outcome] = []
    start = time.perf_counter()
    for case in cases:
        run_tuner(case, kinds, out, lambda key: args.space is None or key.startswith(args.space))
        name, run, passed, failed, na, seconds = summary([o for o in out if o.tuner == case.name])[0]
        line = f"{name:<12} run {run:>3}  passed {passed:>3}  failed {failed:>3}  n/a {na:>2}"
        print(f"{line}  ({seconds:5.1f} s)", flush=True)
    if args.verbose:
        for o in out:
            print(f"  {o.tuner:<12} {o.case:<45} {o.status:<7} {o.seconds:6.2f} s  {o.detail}")
    failures = [o for o in out if o.status == "failed"]
    for o in failures:
        print(f"FAILED {o.tuner} {o.case}: {o.detail}")
    total_run = sum(r[1] for r in summary(out))
    total_na = sum(r[4] for r in summary(out))
    print(
        f"NNI conformance ({'bare' if args.bare else 'wrapped in DnnSATTuner'}): {total_run} run, "
        f"{total_run - len(failures)} passed, {len(failures)} failed, {total_na} not applicable "
        f"in {time.perf_counter() - start:.0f} s"
    )
    if not args.tuner:
        print("Not applicable:")
        for name, reason in NOT_APPLICABLE.items():
            print(f"  {name}: {reason}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
