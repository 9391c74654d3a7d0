"""Ready-made problems."""

from ._synthetic import synthetic_resnet_problem, synthetic_resnet_space

__all__ = ["synthetic_resnet_problem", "synthetic_resnet_space"]
