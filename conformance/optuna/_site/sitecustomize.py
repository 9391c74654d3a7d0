"""Wraps Optuna's built-in samplers at interpreter start-up when the conformance harness asks for it.

The harness puts this directory on PYTHONPATH and sets ``DNNSAT_CONFORMANCE_PROBLEM``; processes that
Optuna's tests spawn (``multiprocessing`` with the ``spawn`` start method) inherit both, so they run
the wrapped samplers too.
"""

import os

if os.environ.get("DNNSAT_CONFORMANCE_PROBLEM"):
    from conformance.optuna._wrap import install

    install(os.environ["DNNSAT_CONFORMANCE_PROBLEM"])
