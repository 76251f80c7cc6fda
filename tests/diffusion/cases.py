"""Conformance cases for jaxkit.diffusion (see tests/conformance.py)."""

import dataclasses

import jax
import jax.numpy as jnp

from jaxkit import diffusion, nn
from tests.conformance import Bad, Case

V, MASK = 5, 4
CFG = nn.TransformerConfig(
    vocab_size=V,
    d_model=8,
    n_layers=1,
    n_heads=2,
    n_kv_heads=1,
    head_dim=4,
    mlp_dim=8,
    causal=False,
)
APPLY = diffusion.transformer_denoiser(CFG)
_P32 = nn.init_params(CFG, key=jax.random.key(7))


def _params(dtype):
    return jax.tree.map(lambda a: a.astype(dtype), _P32)


def _x0(key):
    return jax.random.randint(key, (8, 4), 0, MASK).astype(jnp.int32)


def _loss(params, x0, *, t_min):
    params = jax.tree.map(jnp.asarray, params)  # check_grads passes NumPy leaves
    return diffusion.mdlm_loss(APPLY, params, x0, key=jax.random.key(1), mask_id=MASK, t_min=t_min)


def _bound(x0, params):
    return diffusion.log_likelihood_bound(
        APPLY, params, x0, key=jax.random.key(1), mask_id=MASK, num_samples=2
    )


def _sample(tokens, *, temperature, order="ancestral"):
    return diffusion.sample(
        APPLY,
        _P32,
        tokens,
        key=jax.random.key(2),
        mask_id=MASK,
        num_steps=3,
        temperature=temperature,
        order=order,
        ref_params=_P32,
    )


def _template(key, dtype):
    del dtype
    x = _x0(key)
    hide = jax.random.bernoulli(jax.random.fold_in(key, 1), 0.7, x.shape)
    return (jnp.where(hide, MASK, x),)


def _traj_lp(tokens, steps, params):
    return diffusion.trajectory_log_prob(APPLY, params, tokens, steps, mask_id=MASK, num_steps=3)


def _traj_args(key, dtype):
    x = _x0(key)
    steps = jax.random.randint(jax.random.fold_in(key, 1), x.shape, -1, 3).astype(jnp.int32)
    return x, steps, _params(dtype)


CASES = [
    Case(
        name="diffusion.mdlm_loss",
        fn=_loss,
        make_args=lambda key, dtype: (_params(dtype), _x0(key)),
        hparams={"t_min": (1e-3, 0.05)},
        grad_modes=("rev",),
        grad_argnums=(0,),
        rtol=1e-4,
        vmap=False,  # the times are stratified over the batch (a batch-level estimator)
        shard_argnums=(1,),
        bad=(
            Bad(
                "token outside the alphabet",
                lambda key: ((_P32, _x0(key).at[0, 0].set(V)), {}),
                ValueError,
                "x0",
            ),
            Bad("float tokens", lambda key: ((_P32, jnp.zeros((8, 4))), {}), TypeError, "x0"),
        ),
    ),
    Case(
        name="diffusion.log_likelihood_bound",
        fn=_bound,
        make_args=lambda key, dtype: (_x0(key), _params(dtype)),
        grad_modes=("rev",),
        grad_argnums=(1,),
        rtol=1e-4,
        shard_argnums=(0,),
        bad=(
            Bad(
                "mask id in clean data",
                lambda key: ((_x0(key).at[0, 0].set(MASK), _P32), {}),
                ValueError,
                "x0",
            ),
        ),
    ),
    Case(
        name="diffusion.sample",
        fn=_sample,
        make_args=_template,
        hparams={"temperature": (1.0, 0.7)},
        grad_modes=(),
        dtypes=(jnp.float32,),  # integer tokens; parameters closed over in f32
        bad=(
            Bad(
                "token outside the alphabet",
                lambda key: ((_template(key, None)[0].at[0, 0].set(V + 3),), {}),
                ValueError,
                "tokens",
            ),
            Bad(
                "unknown order",
                lambda key: (_template(key, None), {"order": "x"}),
                ValueError,
                "order",
            ),
            Bad(
                "negative temperature",
                lambda key: (_template(key, None), {"temperature": -1.0}),
                ValueError,
                "temperature",
            ),
        ),
    ),
    Case(
        name="diffusion.trajectory_log_prob",
        fn=_traj_lp,
        make_args=_traj_args,
        grad_modes=("rev",),
        grad_argnums=(2,),
        rtol=1e-4,
        shard_argnums=(0, 1),
        bad=(
            Bad(
                "length mismatch",
                lambda key: ((_x0(key), jnp.zeros((8, 3), jnp.int32), _P32), {}),
                TypeError,
                "unmask_step",
            ),
        ),
    ),
]

_SLOW = {
    "diffusion.log_likelihood_bound": ("grads", "vmap", "dtypes", "sharding", "jit", "traced_once"),
    "diffusion.trajectory_log_prob": ("grads", "vmap", "dtypes", "sharding", "jit", "traced_once"),
    "diffusion.sample": ("vmap",),
    "diffusion.mdlm_loss": ("grads",),
}
CASES = [dataclasses.replace(c, slow_checks=_SLOW.get(c.name, ())) for c in CASES]
