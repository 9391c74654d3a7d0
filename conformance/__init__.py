"""Conformance harnesses: the integrated tools' own test suites, run against dnnsat's wrappers."""
