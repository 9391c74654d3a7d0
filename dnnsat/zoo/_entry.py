"""A zoo entry: :class:`ZooModel` (a callable factory of Problems) and ``register``, which adds it to
``REGISTRY``. The model modules define and register their models; ``_registry`` imports them."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..graph import Network
from ..space import Space

__all__ = ["ZooModel", "REGISTRY", "register"]


class ZooModel:
    """A model family with a default search space.

    ``model(budget=Budget(...), **options)`` returns a ``dnnsat.Problem``; ``model.space()`` the default
    Space; ``model.build(**options)`` the build function ``vars -> Network``; ``model.network(**options)``
    the symbolic network over the default space's variables. ``options`` are the build function's
    keyword arguments (e.g. ``dataset="cifar100"`` for NAS-Bench-201, ``num_classes=`` elsewhere).
    """

    def __init__(
        self, name: str, space: Callable[..., Space], build: Callable[..., Callable[[Any], Network]], doc: str
    ) -> None:
        self.name = name
        self._space = space
        self._build = build
        self.__doc__ = doc

    def space(self) -> Space:
        return self._space()

    def build(self, **options: Any) -> Callable[[Any], Network]:
        return self._build(**options)

    def network(self, **options: Any) -> Network:
        return self._build(**options)(self._space().vars)

    def __call__(self, budget: Any = None, space: Space | None = None, **options: Any) -> Any:
        """A Problem over ``space`` (default: the model's) with the network's costs, rules and ``budget``."""
        from ..cost import Budget
        from ..problem import Problem

        return Problem(space or self.space(), model=self.build(**options), budget=budget or Budget())

    def __repr__(self) -> str:
        return f"<dnnsat.zoo.{self.name}>"


REGISTRY: dict[str, ZooModel] = {}


def register(model: ZooModel) -> ZooModel:
    REGISTRY[model.name] = model
    return model
