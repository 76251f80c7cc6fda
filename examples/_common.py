"""Helpers shared by the examples (not an example: the tour and the tests skip ``_`` files).

One-shot programs (initialisation, evaluation, a few training steps on tiny arrays) cost
more to compile on CPU than to run: the examples compile them with XLA's back-end
optimisation off (:data:`FAST_COMPILE`, through :func:`fast_jit`). The computed values
are the same; each example says which of its programs it compiles this way.

An example imports this module as ``examples._common`` (the tour, the tests, an editable
install) or, run as a script, as ``_common`` (``examples/`` is then ``sys.path[0]``).
"""

import functools

import equinox as eqx
import jax

FAST_COMPILE = {
    "xla_backend_optimization_level": 0,
    "xla_llvm_disable_expensive_passes": True,
    "xla_cpu_use_fusion_emitters": False,
    "xla_cpu_parallel_codegen_split_count": 1,
}

# ``jax.jit`` compiled with :data:`FAST_COMPILE`; takes ``jax.jit``'s other arguments
# (``fast_jit(f, static_argnames=...)``, ``functools.partial(fast_jit, static_argnames=...)``).
fast_jit = functools.partial(jax.jit, compiler_options=FAST_COMPILE)


class _Static:
    """The non-array leaves of a pytree and its structure, hashable (a static argument)."""

    def __init__(self, tree):
        self.leaves, self.treedef = jax.tree.flatten(tree)
        self.key = (self.treedef, tuple(self.leaves))

    def __hash__(self):
        return hash(self.key)

    def __eq__(self, other):
        return isinstance(other, _Static) and self.key == other.key


def fast_filter_jit(fn):
    """``eqx.filter_jit(fn)`` compiled with :data:`FAST_COMPILE`: array leaves of the
    arguments are traced, everything else (Python scalars included) is static; the
    result's non-array leaves (an equinox module's functions) come back as the trace left
    them. Hand-rolled because ``eqx.filter_jit`` takes no ``compiler_options``."""
    out_static = {}

    @functools.partial(fast_jit, static_argnames="static")
    def run(arrays, *, static):
        a, k = eqx.combine(arrays, jax.tree.unflatten(static.treedef, static.leaves))
        dynamic, out_static[static] = eqx.partition(fn(*a, **k), eqx.is_array)
        return dynamic

    @functools.wraps(fn)
    def call(*args, **kwargs):
        arrays, static = eqx.partition((args, kwargs), eqx.is_array)
        static = _Static(static)
        return eqx.combine(run(arrays, static=static), out_static[static])

    return call


def fast_init(make, key):
    """``make(key=key)`` (equinox modules), its random draws in one :func:`fast_jit` program.

    Called eagerly, an initialisation compiles each random draw alone (seconds of CPU for a
    small network); here its array leaves come out of one program and its structure from
    ``eqx.filter_eval_shape``.
    """
    structure = eqx.filter_eval_shape(lambda k: make(key=k), key)
    arrays = fast_jit(lambda k: eqx.filter(make(key=k), eqx.is_array))(key)
    return eqx.combine(arrays, structure)
