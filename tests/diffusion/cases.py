"""Conformance cases for jaxkit.diffusion (see tests/conformance.py)."""

import dataclasses

import jax
import jax.numpy as jnp

from jaxkit import diffusion, nn
from tests.conformance import Bad, Case, steered_case

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


def _steered(tokens, vec, *, temperature):
    """:func:`_sample` with a per-row edit ``[B, D]`` after block 0 (the reference unedited)."""
    return diffusion.sample(
        APPLY, _P32, tokens, key=jax.random.key(2), mask_id=MASK, num_steps=3,
        temperature=temperature, ref_params=_P32, interventions=nn.Interventions({0: vec}),
    )  # fmt: skip


def _steered_args(key, dtype):
    """``_template`` and a per-row edit ``[B, D]`` (sharded with the rows)."""
    return (*_template(key, dtype), jax.random.normal(jax.random.fold_in(key, 2), (8, 8), dtype))


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
            Bad(
                "empty batch",
                lambda key: ((_P32, jnp.zeros((0, 4), jnp.int32)), {}),
                ValueError,
                "x0",
            ),
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
    # the oracles: tests/diffusion/test_interventions.py
    steered_case(
        "diffusion.sample/interventions",
        _steered,
        _steered_args,
        wide_edit=lambda key: ((_template(key, None)[0], jnp.ones((8, 9))), {"temperature": 1.0}),
        layer=0,
        hparams={"temperature": (1.0, 0.7)},
        shard_argnums=(0, 1),
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
            Bad(
                "unmask_step past num_steps",
                lambda key: ((_x0(key), jnp.full((8, 4), 3, jnp.int32), _P32), {}),
                ValueError,
                "unmask_step",
            ),
        ),
    ),
]


def _reward(affinity, p_agonist, *, tau_s, a_min=0.0):
    return diffusion.gated_reward(affinity, p_agonist, direction=-1, tau_s=tau_s, a_min=a_min)


def _reward_args(key, dtype):
    k1, k2 = jax.random.split(key)
    return (
        jax.random.uniform(k1, (8,), dtype, 0.5, 2.0),
        jax.random.uniform(k2, (8,), dtype),
    )


def _log_w(reward, p_agonist, *, alpha):
    return diffusion.log_importance_weight(reward, p_agonist, log_ratio=0.3, alpha=alpha)


def _wdce(params, x0, log_w, *, lam_clip):
    params = jax.tree.map(jnp.asarray, params)
    return diffusion.wdce_loss(
        APPLY,
        params,
        x0,
        log_w,
        key=jax.random.key(1),
        mask_id=MASK,
        replicates=2,
        lam_clip=lam_clip,
    )


def _wdce_args(key, dtype):
    return _params(dtype), _x0(key), jax.random.normal(jax.random.fold_in(key, 1), (8,), dtype)


def _kl(params, x0):
    params = jax.tree.map(jnp.asarray, params)
    ref = jax.tree.map(
        lambda a: (a * 0.9).astype(a.dtype), _params(jnp.result_type(params["embed"]))
    )
    return diffusion.kl_to_reference(APPLY, params, ref, x0, key=jax.random.key(1), mask_id=MASK)


def _contrastive(emb, labels, *, margin):
    # fixed margin: the adaptive one carries no gradient by design, which a numerical
    # derivative would see (tested directly in test_td3b.py)
    return diffusion.contrastive_margin(emb, labels, margin=margin, adaptive=False)


def _td3b(params, x0, log_w, *, kl_weight, contrastive_weight):
    params = jax.tree.map(jnp.asarray, params)
    n = x0.shape[0]
    d = jnp.where(jnp.arange(n) % 2 == 0, 1, -1).astype(jnp.int32) + jnp.zeros_like(x0[:, 0])
    z = jnp.zeros_like(log_w)
    buf = diffusion.Buffer(
        tokens=x0,
        unmask_step=jnp.zeros_like(x0),
        valid=jnp.ones_like(x0, dtype=bool),
        direction=d,
        affinity=z,
        p_agonist=z,
        reward=z,
        log_ratio=z,
        log_w=log_w,
    )
    loss, m = diffusion.td3b_loss(
        APPLY,
        EMBED,
        params,
        _params(jnp.result_type(params["embed"])),
        buf,
        key=jax.random.key(2),
        mask_id=MASK,
        replicates=2,
        kl_weight=kl_weight,
        contrastive_weight=contrastive_weight,
        adaptive_margin=False,  # see _contrastive
    )
    return loss, m["wdce"], m["kl"]


EMBED = diffusion.transformer_embedder(CFG)

CASES += [
    Case(
        name="diffusion.gated_reward",
        fn=_reward,
        make_args=_reward_args,
        hparams={"tau_s": (0.1, 0.3)},
        shard_argnums=(0, 1),
        bad=(
            Bad(
                "non-finite affinity",
                lambda key: (
                    (
                        _reward_args(key, jnp.float32)[0].at[0].set(jnp.nan),
                        _reward_args(key, jnp.float32)[1],
                    ),
                    {},
                ),
                ValueError,
                "affinity",
            ),
            Bad(
                "tau_s <= 0",
                lambda key: (_reward_args(key, jnp.float32), {"tau_s": 0.0}),
                ValueError,
                "tau_s",
            ),
            Bad(
                "NaN a_min (a traced hyperparameter)",
                lambda key: (_reward_args(key, jnp.float32), {"a_min": jnp.nan}),
                ValueError,
                "a_min",
            ),
        ),
    ),
    Case(
        name="diffusion.log_importance_weight",
        fn=_log_w,
        make_args=_reward_args,
        hparams={"alpha": (0.1, 0.5)},
        grad_argnums=(0,),
        shard_argnums=(0, 1),
        bad=(
            Bad(
                "non-finite reward",
                lambda key: (
                    (
                        _reward_args(key, jnp.float32)[0].at[0].set(jnp.inf),
                        _reward_args(key, jnp.float32)[1],
                    ),
                    {},
                ),
                ValueError,
                "reward",
            ),
        ),
    ),
    Case(
        name="diffusion.wdce_loss",
        fn=_wdce,
        make_args=_wdce_args,
        hparams={"lam_clip": (1e5, 50.0)},
        grad_modes=("rev",),
        grad_argnums=(0,),
        rtol=1e-4,
        shard_argnums=(1, 2),
        bad=(
            Bad(
                "log_w length mismatch",
                lambda key: ((_P32, _x0(key), jnp.zeros((7,))), {}),
                TypeError,
                "log_w",
            ),
            Bad(
                "token outside the alphabet",
                lambda key: ((_P32, _x0(key).at[1, 1].set(-2), jnp.zeros((8,))), {}),
                ValueError,
                "x0",
            ),
        ),
    ),
    Case(
        name="diffusion.kl_to_reference",
        fn=_kl,
        make_args=lambda key, dtype: (_params(dtype), _x0(key)),
        grad_modes=("rev",),
        rtol=1e-4,
        shard_argnums=(1,),
        vmap=False,  # a batch mean
    ),
    Case(
        name="diffusion.contrastive_margin",
        fn=_contrastive,
        make_args=lambda key, dtype: (
            jax.random.normal(key, (8, 3), dtype),
            jnp.array([1, -1, 1, 1, -1, -1, 1, -1], jnp.int32),
        ),
        hparams={"margin": (1.0, 2.0)},
        grad_modes=("rev",),
        vmap=True,
        shard_argnums=(0, 1),
        bad=(
            Bad(
                "rank-1 emb",
                lambda key: ((jnp.zeros(8), jnp.ones(8, jnp.int32)), {}),
                TypeError,
                "emb",
            ),
        ),
    ),
    Case(
        name="diffusion.td3b_loss",
        fn=_td3b,
        make_args=_wdce_args,
        hparams={"kl_weight": (0.1, 0.3), "contrastive_weight": (0.1, 0.05)},
        grad_modes=("rev",),
        rtol=1e-4,
        vmap=False,  # a loss over the whole buffer (pairs, weights normalised over rows)
        shard_argnums=(1, 2),
        bad=(
            Bad(
                "negative kl_weight",
                lambda key: (_wdce_args(key, jnp.float32), {"kl_weight": -1.0}),
                ValueError,
                "kl_weight",
            ),
            Bad(
                "non-finite log_w",
                lambda key: ((_P32, _x0(key), jnp.full((8,), jnp.nan)), {}),
                ValueError,
                "log_w",
            ),
        ),
    ),
]

# One case per family runs every check by default (sample, gated_reward; mdlm_loss and
# td3b_loss all but the costly ones, whose sampler-path twins run by default); the others
# keep eager_cache, eval_shape and bad inputs by default and run the rest in
# `make test-slow`.
_REST = ("grads", "vmap", "dtypes", "sharding", "jit", "traced_once")
_SLOW = {
    "diffusion.mdlm_loss": ("grads", "sharding"),
    "diffusion.sample": ("vmap",),
    "diffusion.td3b_loss": ("grads", "dtypes", "sharding", "traced_once", "jit"),
    "diffusion.log_likelihood_bound": _REST,
    "diffusion.trajectory_log_prob": _REST,
    "diffusion.wdce_loss": _REST,
    "diffusion.kl_to_reference": _REST,
    "diffusion.log_importance_weight": _REST,
    "diffusion.contrastive_margin": _REST,
}
CASES = [dataclasses.replace(c, slow_checks=_SLOW.get(c.name, ())) for c in CASES]
