"""Keyword-sweep recipes for equivariance (see tests/keywords.py)."""

import functools
import itertools

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import optax

import jaxkit.equivariance as E

_rng = np.random.default_rng(0)
X = _rng.normal(size=(8, 2)).astype(np.float32)
T = _rng.normal(size=(8, 2)).astype(np.float32)
W = _rng.normal(size=(2, 2)).astype(np.float32)
PERMS = np.stack([np.eye(3)[list(p)] for p in itertools.permutations(range(3))])
KERNEL = _rng.normal(size=(1, 4, 1, 4, 3, 3)).astype(np.float32)  # p4 kernel
IMG = _rng.normal(size=(1, 4, 3, 3)).astype(np.float32)  # regular features [C, 4, H, W]
THETA = np.asarray([0.2, 0.5, 0.9], np.float32)


@functools.cache
def _group():
    return E.cyclic_rot2d(4)


@functools.cache
def _layer():
    return E.RECMLinear(_group(), key=jax.random.key(0))


@functools.cache
def _conv():
    return E.RECMGroupConvC4(1, 1, key=jax.random.key(0))


def _key():
    return jax.random.key(0)


def _step(tx, params=None):
    """One update of ``tx`` on ``params`` (default: the layer's parameters)."""
    if params is None:
        params = eqx.filter(_layer(), eqx.is_inexact_array)
    grads = jax.tree.map(jnp.ones_like, params)
    return tx.update(grads, tx.init(params), params)[0]


RECIPES = {
    "jaxkit.equivariance.linear_gap": lambda **kw: E.linear_gap(X, T, _group(), **kw),
    "jaxkit.equivariance.mmd_gap": lambda **kw: E.mmd_gap(
        X, T, _group(), **{"key": _key(), "n_permutations": 4, **kw}
    ),
    "jaxkit.equivariance.finite_group": functools.partial(E.finite_group, PERMS, PERMS),
    "jaxkit.equivariance.normalized_complement": lambda **kw: E.normalized_complement(
        W, _group(), **kw
    ),
    "jaxkit.equivariance.equivariance_error": lambda **kw: E.equivariance_error(
        lambda z: z, X, _group(), **{"key": _key(), "n_samples": 4, **kw}
    ),
    "jaxkit.equivariance.equivariant_basis": lambda **kw: E.equivariant_basis(_group(), **kw),
    "jaxkit.equivariance.recm_modulation": lambda **kw: _step(
        E.recm_modulation(0.1, **kw), {"theta": jnp.asarray(0.5)}
    ),
    "jaxkit.equivariance.recm_optimizer": lambda **kw: _step(
        E.recm_optimizer(optax.sgd(0.1), learning_rate=0.1, **kw)
    ),
    "jaxkit.equivariance.rpp_penalty": lambda **kw: E.rpp_penalty(_layer(), **kw),
    # a default passed explicitly: the array sweep reaches a function through a call that binds
    # an argument
    "jaxkit.equivariance.c4_regular": lambda **kw: E.c4_regular(**{"channels_in": 1, **kw}),
    "jaxkit.equivariance.cyclic_rot2d": functools.partial(E.cyclic_rot2d, 4),
    "jaxkit.equivariance.so2_rot2d": lambda **kw: E.so2_rot2d(**{"mult_in": 1, **kw}),
    "jaxkit.equivariance.o3_irreps": functools.partial(E.o3_irreps, "1x1o"),
    "jaxkit.equivariance.reynolds_mc": lambda **kw: E.reynolds_mc(
        W, _group(), **{"key": _key(), "n_samples": 4, **kw}
    ),
    "jaxkit.equivariance.haar_sample": lambda **kw: E.haar_sample(
        _group(), 2, **{"key": _key(), **kw}
    ),
    "jaxkit.equivariance.c4_conv_reynolds": functools.partial(
        E.c4_conv_reynolds, KERNEL, lifting=False
    ),
    "jaxkit.equivariance.c4_image_act": functools.partial(E.c4_image_act, IMG, 1, regular=True),
    "jaxkit.equivariance.c4_kernel_transform": functools.partial(
        E.c4_kernel_transform, KERNEL, 1, lifting=False
    ),
    "jaxkit.equivariance.complement": lambda **kw: E.complement(W, _group(), **kw),
    "jaxkit.equivariance.reynolds": lambda **kw: E.reynolds(W, _group(), **kw),
    "jaxkit.equivariance.cr_triangle_schedule": functools.partial(E.cr_triangle_schedule, 3, 10),
    "jaxkit.equivariance.lie_derivative_penalty": lambda **kw: E.lie_derivative_penalty(
        W, _group(), X, **kw
    ),
    "jaxkit.equivariance.recm_update_rule": functools.partial(
        E.recm_update_rule, THETA, THETA - 0.5, 0.1, 0.1, 1.0
    ),
    "jaxkit.equivariance.set_theta": lambda **kw: E.set_theta(_layer(), 0.5, **kw),
    "jaxkit.equivariance.Group": lambda **kw: E.Group(
        "perm", "finite", 3, 3, ("perm",), PERMS, PERMS, **kw
    ),
    "jaxkit.equivariance.RECMLinear": lambda **kw: E.RECMLinear(_group(), **{"key": _key(), **kw}),
    "jaxkit.equivariance.RECMGroupConvC4": lambda **kw: E.RECMGroupConvC4(
        1, 1, **{"key": _key(), **kw}
    ),
    "jaxkit.equivariance.RECMe3nnLinear": lambda **kw: E.RECMe3nnLinear(
        "1x0e+1x1o", "1x1o", **{"key": _key(), **kw}
    ),
    "jaxkit.equivariance.RECMLinear.__call__": lambda **kw: _layer()(X[0], **kw),
    "jaxkit.equivariance.RECMGroupConvC4.__call__": lambda **kw: _conv()(IMG, **kw),
    "jaxkit.equivariance.Group.sample": lambda **kw: _group().sample(2, **{"key": _key(), **kw}),
    "jaxkit.equivariance.Group.representatives": lambda **kw: _group().representatives(
        **{"key": _key(), **kw}
    ),
}

EXEMPT: dict[str, str] = {
    "jaxkit.equivariance.finite_group:name": "free text: the group's label, used in messages",
}

ANY_RANK: dict[str, str] = {
    "jaxkit.equivariance.reynolds_mc:w": "`[*batch, d_out, d_in]`: leading batch axes",
    "jaxkit.equivariance.reynolds:w": "`[*batch, d_out, d_in]`: leading batch axes",
    "jaxkit.equivariance.complement:w": "`[*batch, d_out, d_in]`: leading batch axes",
    "jaxkit.equivariance.RECMLinear.__call__:x": "`[..., d_in]`: leading batch axes (one "
    "example or a batch), as the docstring says",
    "jaxkit.equivariance.c4_image_act:x": "`[..., C, (4,) H, W]`: any leading axes",
    "jaxkit.equivariance.recm_update_rule:theta": "elementwise: the level has any shape "
    "(usually 0-d), as the docstring says",
    "jaxkit.equivariance.recm_update_rule:grad": "elementwise: the gradient of `theta`, any "
    "shape that broadcasts with it",
}
