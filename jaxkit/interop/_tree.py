"""Framework-neutral plumbing shared by the flax NNX and haiku adapters.

A jaxkit layer is either an equinox module or an ``(init, apply)`` pair where
``init(*, key) -> params`` builds a pytree of arrays and ``apply(params, *args,
**kwargs)`` runs it. Both adapters need the same three things: the layer's
array leaves under stable string names (floating arrays are trainable
parameters, other arrays are non-trainable buffers), their initial values, and
a way to rebuild a callable from new leaf values. This module provides them.
"""

import dataclasses
from collections.abc import Callable
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp

from jaxkit import _validate


@dataclasses.dataclass(frozen=True, eq=False)
class Plan:
    """How to turn named leaf values back into a callable layer.

    Attributes:
      param_names: names of the floating (trainable) leaves, in tree order.
      buffer_names: names of the other array leaves, in tree order.
      shapes: ``jax.ShapeDtypeStruct`` per name (params then buffers).
      is_param: per leaf of the array tree, whether it is a parameter.
      treedef: structure of the array tree (arrays only, ``None`` elsewhere).
      static: the non-array part of an equinox module (``None`` for a pair).
      apply: the pair's apply function (``None`` for a module).
    """

    param_names: tuple[str, ...]
    buffer_names: tuple[str, ...]
    shapes: dict[str, jax.ShapeDtypeStruct]
    is_param: tuple[bool, ...]
    treedef: Any
    static: Any
    apply: Callable[..., Any] | None

    def rebuild(self, params: dict[str, Any], buffers: dict[str, Any]) -> Callable[..., Any]:
        """Return the layer as a callable, with leaves taken from the two dicts."""
        p_it = iter(self.param_names)
        b_it = iter(self.buffer_names)
        leaves = [params[next(p_it)] if p else buffers[next(b_it)] for p in self.is_param]
        tree = jax.tree.unflatten(self.treedef, leaves)
        if self.apply is None:
            return eqx.combine(tree, self.static)
        apply = self.apply
        return lambda *args, **kwargs: apply(tree, *args, **kwargs)

    def call(
        self,
        params: dict[str, Any],
        buffers: dict[str, Any],
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        batch_axis: int | None,
    ) -> Any:
        """Run the rebuilt layer, vmapped over ``batch_axis`` of the positional args."""
        fn = self.rebuild(params, buffers)
        if batch_axis is None:
            return fn(*args, **kwargs)
        return jax.vmap(lambda *a: fn(*a, **kwargs), in_axes=batch_axis)(*args)


def is_pair(layer: Any) -> bool:
    """True for an ``(init, apply)`` tuple/list of two callables."""
    return isinstance(layer, tuple | list) and len(layer) == 2 and all(callable(f) for f in layer)


def _name(path: Any) -> str:
    name = jax.tree_util.keystr(path, simple=True, separator=".")
    return name.replace("/", ".") or "value"


def _is_array(x: Any) -> bool:
    return isinstance(x, jax.Array | jax.ShapeDtypeStruct) or eqx.is_array(x)


def _is_float(x: Any) -> bool:
    return jnp.issubdtype(x.dtype, jnp.inexact)


def plan(layer: Any, *, key: Any, abstract: bool) -> tuple[Plan, Callable[[], dict[str, Any]]]:
    """Analyse ``layer`` and return its :class:`Plan` and a thunk of initial values.

    Args:
      layer: an ``eqx.Module`` or an ``(init, apply)`` pair.
      key: PRNG key for a pair's ``init`` (ignored for a module, which already
        holds its values).
      abstract: for a pair, find shapes with ``jax.eval_shape`` and run ``init``
        only when the thunk is called (haiku calls it only while initialising).

    Returns:
      ``(plan, initial)``: ``initial()`` returns ``{name: value}`` for every
      parameter and buffer.

    Raises:
      TypeError: if ``layer`` is neither form, or a pair comes without a PRNG key.
    """
    if key is not None:  # a wrong key is an error even where the layer needs none
        _validate.is_key(key)
    if isinstance(layer, eqx.Module):
        arrays, static = eqx.partition(layer, eqx.is_array)
        apply = None
        tree = arrays
        init_tree: Callable[[], Any] = lambda: arrays
    elif is_pair(layer):
        if key is None:
            raise TypeError(
                "`key` is required when `layer` is an (init, apply) pair: the "
                "initial parameters come from `init(key=key)`."
            )
        _validate.is_key(key)
        init, apply = layer
        static = None
        if abstract:
            tree = jax.eval_shape(lambda k: init(key=k), key)
            cache: list[Any] = []

            def init_tree() -> Any:
                if not cache:
                    cache.append(init(key=key))
                return cache[0]
        else:
            tree = init(key=key)
            init_tree = lambda: tree
    else:
        raise TypeError(
            "`layer` must be an equinox module or an (init, apply) pair of "
            f"callables, got {type(layer).__name__}."
        )
    path_leaves, treedef = jax.tree_util.tree_flatten_with_path(tree)
    for path, leaf in path_leaves:
        if not _is_array(leaf):
            raise TypeError(
                f"`layer` leaf {_name(path)!r} is a {type(leaf).__name__}; the "
                "params of an (init, apply) pair must be arrays."
            )
    names = [_name(p) for p, _ in path_leaves]
    if len(set(names)) != len(names):
        raise ValueError(f"`layer` has clashing leaf names: {names}.")
    is_param = tuple(_is_float(leaf) for _, leaf in path_leaves)
    shapes = {
        n: jax.ShapeDtypeStruct(leaf.shape, leaf.dtype)
        for n, (_, leaf) in zip(names, path_leaves, strict=True)
    }
    pl = Plan(
        param_names=tuple(n for n, p in zip(names, is_param, strict=True) if p),
        buffer_names=tuple(n for n, p in zip(names, is_param, strict=True) if not p),
        shapes=shapes,
        is_param=is_param,
        treedef=treedef,
        static=static,
        apply=apply,
    )

    def initial() -> dict[str, Any]:
        leaves = jax.tree.leaves(init_tree())
        return dict(zip(names, leaves, strict=True))

    return pl, initial


def check_batch_axis(batch_axis: Any) -> None:
    """``batch_axis`` is ``None`` or an int."""
    if batch_axis is not None and (isinstance(batch_axis, bool) or not isinstance(batch_axis, int)):
        raise TypeError(f"`batch_axis` must be None or an int, got {batch_axis!r}.")
