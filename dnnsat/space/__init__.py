"""Search spaces: parameters, conditions and the symbolic variables that stand for them.

A finite parameter (``Int``, stepped ``Float``, ``Categorical``) has an ordered list of *encoded* values
that the solver works with: numbers sorted ascending for numeric parameters, or the choice index
``0..n-1`` for categoricals whose choices are not all numbers. ``Float`` without a step is continuous.
Conversions to and from Optuna distributions, NNI search-space JSON and dict/JSON/YAML live in
:mod:`dnnsat.space._formats` and are exposed as ``Space`` methods.
"""

# Besides ``__all__``, re-exported (``X as X``): the finite-size limit, the condition type, and the
# conversion functions (formerly in ``dnnsat._space_io``).
from ._formats import NNI_SEP as NNI_SEP
from ._formats import config_from_nni as config_from_nni
from ._formats import config_to_nni as config_to_nni
from ._formats import nni_child_name as nni_child_name
from ._formats import save_space as save_space
from ._formats import space_to_dict as space_to_dict
from ._formats import space_to_nni as space_to_nni
from ._formats import space_to_optuna as space_to_optuna
from ._params import MAX_FINITE_VALUES as MAX_FINITE_VALUES
from ._params import Categorical, Float, Int, Param, SpaceError
from ._params import Condition as Condition
from ._space import Space
from ._space import load_space as load_space
from ._space import space_from_dict as space_from_dict
from ._space import space_from_nni as space_from_nni
from ._space import space_from_optuna as space_from_optuna

__all__ = ["Param", "Int", "Float", "Categorical", "Space", "SpaceError"]
