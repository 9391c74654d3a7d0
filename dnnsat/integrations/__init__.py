"""Adapters that plug dnnsat into AutoML tools (imported lazily; each needs its own extra)."""
