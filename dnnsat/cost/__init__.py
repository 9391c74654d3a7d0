"""Cost models over symbolic networks: weights and FLOPs (memory and latency: later issues).

``attach(problem, model, budget)`` is what ``dnnsat.Problem(space, model=, budget=)`` calls.
This package never imports torch.
"""

from ._attach import attach, build_network, cost_expressions
from ._budget import DTYPE_BYTES, Budget, CostModelUnavailable

__all__ = ["Budget", "CostModelUnavailable", "DTYPE_BYTES", "attach", "build_network", "cost_expressions"]
