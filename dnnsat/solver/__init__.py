"""Feasibility engine: interval branch-and-bound over finite domains, exact enumeration, Z3."""

from ._boxes import Domain
from ._engine import Engine

__all__ = ["Domain", "Engine"]
