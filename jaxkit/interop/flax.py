"""Flax NNX adapter: use any jaxkit layer inside an ``nnx.Module`` model.

``to_nnx(layer)`` wraps an equinox module (or an ``(init, apply)`` pair) as an
``nnx.Module`` whose floating arrays are ``nnx.Param`` variables (so
``nnx.Optimizer``, ``nnx.grad`` and ``nnx.state(model, nnx.Param)`` see them)
and whose other arrays (integer tables, masks) are non-trainable
:class:`Buffer` variables. The forward pass rebuilds the layer from the current
variable values and calls it, so outputs are exactly the wrapped layer's.
Randomness comes only from explicit keys: a pair's ``init`` gets ``key`` (or
``rngs.params()``), and call-time keys (dropout) are passed as arguments.

Requires the ``flax`` extra: ``pip install 'jaxkit[flax]'``.
"""

from typing import Any

import jax

from jaxkit._extras import require
from jaxkit.interop import _tree

nnx = require("flax.nnx", extra="flax", what="jaxkit.interop.flax needs flax")

__all__ = ["Buffer", "NNXAdapter", "to_nnx"]


class Buffer(nnx.Variable):
    """A non-trainable array of a wrapped layer (non-floating leaves)."""


class NNXAdapter(nnx.Module):
    """An ``nnx.Module`` holding a jaxkit layer's arrays as NNX variables.

    Build it with :func:`to_nnx`. Calling it calls the wrapped layer with the
    current parameter values; :meth:`unwrap` returns the layer (the equinox
    module, or the pair's params pytree) with those values.

    Attributes:
      params: ``nnx.Dict`` of ``nnx.Param``, keyed by the leaf's path
        (``"layers.0.weight"``).
      buffers: ``nnx.Dict`` of :class:`Buffer` for non-floating arrays.
    """

    def __init__(
        self,
        layer: Any,
        *,
        key: Any = None,
        rngs: Any = None,
        batch_axis: int | None = None,
    ):
        """See :func:`to_nnx`."""
        if rngs is not None:
            if key is not None:
                raise ValueError("pass either `key` or `rngs`, not both.")
            if not isinstance(rngs, nnx.Rngs):
                raise TypeError(f"`rngs` must be an nnx.Rngs, got {type(rngs).__name__}.")
            if _tree.is_pair(layer):
                key = rngs.params()
        _tree.check_batch_axis(batch_axis)
        plan, initial = _tree.plan(layer, key=key, abstract=False)
        values = initial()
        self._plan = plan
        self._batch_axis = batch_axis
        self.params = nnx.Dict({n: nnx.Param(values[n]) for n in plan.param_names})
        self.buffers = nnx.Dict({n: Buffer(values[n]) for n in plan.buffer_names})

    def _values(self) -> tuple[dict[str, Any], dict[str, Any]]:
        params = {n: self.params[n][...] for n in self._plan.param_names}
        buffers = {n: self.buffers[n][...] for n in self._plan.buffer_names}
        return params, buffers

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """Call the wrapped layer (``apply(params, *args, **kwargs)`` for a pair).

        With ``batch_axis`` set at construction, the layer is vmapped over that
        axis of every positional argument; keyword arguments are not mapped.
        """
        params, buffers = self._values()
        return self._plan.call(params, buffers, args, kwargs, self._batch_axis)

    def unwrap(self) -> Any:
        """The wrapped layer with the current values.

        Returns:
          An equinox module, or the pair's params pytree.
        """
        params, buffers = self._values()
        if self._plan.apply is None:
            return self._plan.rebuild(params, buffers)
        p_it = iter(self._plan.param_names)
        b_it = iter(self._plan.buffer_names)
        leaves = [params[next(p_it)] if p else buffers[next(b_it)] for p in self._plan.is_param]
        return jax.tree.unflatten(self._plan.treedef, leaves)


def to_nnx(
    layer: Any,
    *,
    key: Any = None,
    rngs: Any = None,
    batch_axis: int | None = None,
) -> NNXAdapter:
    """Wrap a jaxkit layer as a flax NNX module.

    Args:
      layer: an ``eqx.Module`` (its current arrays become the initial values),
        or an ``(init, apply)`` pair with ``init(*, key) -> params`` and
        ``apply(params, *args, **kwargs) -> output``.
      key: PRNG key (``jax.random.key``) passed to a pair's ``init``; required
        for a pair unless ``rngs`` is given, ignored for a module.
      rngs: alternatively an ``nnx.Rngs``; a pair's ``init`` gets
        ``rngs.params()``.
      batch_axis: if an int, the (unbatched) layer is vmapped over this axis of
        every positional argument at call time.

    Returns:
      An :class:`NNXAdapter` whose floating arrays are ``nnx.Param`` state.

    Raises:
      TypeError: if ``layer`` is neither form, or a pair has no key.
      ValueError: if both ``key`` and ``rngs`` are given.

    Example:
      >>> import equinox as eqx, jax, jax.numpy as jnp
      >>> mlp = eqx.nn.MLP(3, 2, 8, 1, key=jax.random.key(0))
      >>> m = to_nnx(mlp, batch_axis=0)
      >>> m(jnp.ones((4, 3))).shape
      (4, 2)

    References:
      Flax NNX, https://flax.readthedocs.io/en/latest/nnx_basics.html;
      Kidger & Garcia, "Equinox: neural networks in JAX via callable PyTrees
      and filtered transformations", 2021, arXiv:2111.00254.
    """
    return NNXAdapter(layer, key=key, rngs=rngs, batch_axis=batch_axis)
