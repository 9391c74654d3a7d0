"""NNI conformance: NNI 3.0's built-in tuner test procedure run with every tuner wrapped in ``DnnSATTuner``.

Run it with ``python -m conformance.nni`` (see :mod:`conformance.nni.__main__`); the procedure and the
tables of tuners and not-applicable cases are in :mod:`conformance.nni._harness`.
"""
