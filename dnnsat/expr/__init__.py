"""Symbolic expressions: an immutable, hash-consed DAG with three evaluators.

Nodes are interned, so structurally equal expressions are the same object and every evaluator can
memoise per node. Sorts: ``"int"`` (Python ``int``; numpy ``int64``), ``"real"`` (``float64``) and
``"bool"``. Operators: ``+ - * /`` (``/`` is real division), ``//`` (floor division), :func:`ceildiv`,
:func:`minimum`, :func:`maximum`, :func:`where`, comparisons, ``& | ~`` on booleans, :func:`sum_`.

Division by zero is defined as ``0`` in every evaluator (``x // 0 == ceildiv(x, 0) == x / 0 == 0``),
so that numpy, Python and Z3 agree on every point.

A variable with ``labels`` (a categorical of non-numeric choices) stands for the index of its choice:
only ``==`` and ``!=`` against a label or another expression are defined on it; arithmetic and
ordering comparisons raise :class:`TypeError`.

Expressions pickle (any protocol): a DAG is written as one flat, topologically ordered node list (no
recursion, so 10**5-deep chains are fine; a node shared by several pickled expressions is written once
and referenced after), and unpickled nodes are interned again, so ``pickle.loads(pickle.dumps(e)) is e``
within a process and a fresh process builds the same nodes when it builds the same expressions.

Evaluators (all agree; property tests check it):

* :func:`compile_scalar` - Python function of one assignment (exact, arbitrary-precision ints);
* :func:`compile_vectorized` - numpy function of columns of assignments;
* :func:`compile_interval` - numpy function of boxes (``lo``/``hi`` columns) giving sound bounds;
  :func:`compile_interval_scalar` the same for one box of Python numbers, for a few boxes at a time;
* :func:`to_z3` - lowering to Z3 terms.
"""

# ``X as X``: importable from here as before the split, not in ``__all__`` (helpers other modules use,
# the unpickling helper named by pickles written before, private names the tests reach).
from ._intervals import _dtype_plan as _dtype_plan
from ._intervals import _gate_signs as _gate_signs
from ._intervals import _interval_functions as _interval_functions
from ._intervals import _interval_text as _interval_text
from ._intervals import compile_interval, compile_interval_scalar, interval
from ._nodes import INT64_SAFE as INT64_SAFE
from ._nodes import (
    Const,
    Expr,
    ExprLike,
    Var,
    all_,
    any_,
    as_expr,
    ceildiv,
    maximum,
    minimum,
    substitute,
    sum_,
    topological,
    variables,
    where,
)
from ._nodes import _last as _last
from ._nodes import digest as digest
from ._nodes import label_index as label_index
from ._scalar import compile_scalar
from ._vector_forms import vector_forms as vector_forms
from ._vectorized import _compile_vectorized as _compile_vectorized
from ._vectorized import compile_vectorized
from ._z3 import to_z3

__all__ = [
    "Expr",
    "Var",
    "Const",
    "ExprLike",
    "as_expr",
    "ceildiv",
    "minimum",
    "maximum",
    "where",
    "sum_",
    "all_",
    "any_",
    "topological",
    "variables",
    "substitute",
    "compile_scalar",
    "compile_vectorized",
    "compile_interval",
    "compile_interval_scalar",
    "interval",
    "to_z3",
]
