"""Optuna's own sampler tests, run with every built-in sampler wrapped in DnnSATSampler.

Entry point: ``python -m conformance.optuna`` (see ``__main__``).
"""
