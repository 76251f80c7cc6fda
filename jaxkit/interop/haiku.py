"""Haiku adapter: use any jaxkit layer inside an ``hk.transform``-ed model.

``to_haiku(layer)`` returns an ``hk.Module`` (build and call it inside a
function passed to ``hk.transform``) whose floating arrays are haiku
parameters (``hk.get_parameter``) and whose other arrays are haiku state
(``hk.get_state``). The initial values are the equinox module's own arrays, or
``init(key=key)`` of an ``(init, apply)`` pair; the adapter never draws from
``hk.next_rng_key``, so randomness comes only from explicit keys. Haiku is in
maintenance mode: this adapter exists for interop with existing haiku code.

Requires the ``haiku`` extra: ``pip install 'jaxkit[haiku]'``.
"""

from typing import Any

from jaxkit._extras import require
from jaxkit.interop import _tree

hk = require("haiku", extra="haiku", what="jaxkit.interop.haiku needs dm-haiku")

__all__ = ["HaikuAdapter", "to_haiku"]


class HaikuAdapter(hk.Module):
    """An ``hk.Module`` that calls a jaxkit layer with haiku-managed arrays.

    Build it with :func:`to_haiku` inside a transformed function. Parameter
    names are the leaf paths (``"layers.0.weight"``) under the module's name.
    """

    def __init__(
        self,
        layer: Any,
        *,
        key: Any = None,
        batch_axis: int | None = None,
        name: str | None = None,
    ):
        """See :func:`to_haiku`."""
        super().__init__(name=name)
        _tree.check_batch_axis(batch_axis)
        self._plan, self._initial = _tree.plan(layer, key=key, abstract=True)
        self._batch_axis = batch_axis

    def _get(self, getter: Any, names: tuple[str, ...]) -> dict[str, Any]:
        out = {}
        for n in names:
            s = self._plan.shapes[n]
            out[n] = getter(n, s.shape, s.dtype, init=lambda *_, n=n: self._initial()[n])
        return out

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """Call the wrapped layer (``apply(params, *args, **kwargs)`` for a pair).

        With ``batch_axis`` set, the layer is vmapped over that axis of every
        positional argument; keyword arguments are not mapped.
        """
        params = self._get(hk.get_parameter, self._plan.param_names)
        buffers = self._get(hk.get_state, self._plan.buffer_names)
        return self._plan.call(params, buffers, args, kwargs, self._batch_axis)


def to_haiku(
    layer: Any,
    *,
    key: Any = None,
    batch_axis: int | None = None,
    name: str | None = None,
) -> HaikuAdapter:
    """Wrap a jaxkit layer as a haiku module (call inside ``hk.transform``).

    Args:
      layer: an ``eqx.Module`` (its arrays are the initial values) or an
        ``(init, apply)`` pair with ``init(*, key) -> params`` and
        ``apply(params, *args, **kwargs) -> output``.
      key: PRNG key (``jax.random.key``) for a pair's ``init``; required for a
        pair, ignored for a module. ``init`` runs only while haiku initialises.
      batch_axis: if an int, vmap the unbatched layer over this axis of every
        positional argument.
      name: haiku module name (default: derived from the class name).

    Returns:
      A :class:`HaikuAdapter`.

    Raises:
      TypeError: if ``layer`` is neither form, or a pair has no key.

    Example:
      >>> import equinox as eqx, haiku as hk, jax, jax.numpy as jnp
      >>> mlp = eqx.nn.MLP(3, 2, 8, 1, key=jax.random.key(0))
      >>> f = hk.transform(lambda x: to_haiku(mlp, batch_axis=0)(x))
      >>> params = f.init(None, jnp.ones((4, 3)))
      >>> f.apply(params, None, jnp.ones((4, 3))).shape
      (4, 2)

    References:
      Hennigan et al., "Haiku: Sonnet for JAX", 2020,
      https://github.com/google-deepmind/dm-haiku.
    """
    return HaikuAdapter(layer, key=key, batch_axis=batch_axis, name=name)
