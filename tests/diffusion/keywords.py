"""Keyword-sweep recipes for diffusion (see tests/keywords.py)."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import optax

from jaxkit import diffusion
from tests.diffusion import _toys
from tests.diffusion.cases import CFG

V, L, MASK = 3, 4, 3  # 3 letters + [MASK] (id 3), length 4
_rng = np.random.default_rng(0)
X0 = _rng.integers(0, V, size=(4, L)).astype(np.int32)
TEMPLATE = np.full((4, L), MASK, np.int32)
AFFINITY = _rng.uniform(0.5, 2.0, size=(4,)).astype(np.float32)
P_AGONIST = _rng.uniform(size=(4,)).astype(np.float32)
LOG_W = _rng.normal(size=(4,)).astype(np.float32)
EMB = _rng.normal(size=(4, 3)).astype(np.float32)
LABELS = np.array([1, -1, 1, -1], np.int32)


def _model():
    """``(apply_fn, params)``: a cheap random MLP denoiser (built once)."""
    return _toys.random_mlp(V, L, 0)


def _oracle(tokens):
    t = np.asarray(tokens)
    return {
        "affinity": (t == 2).mean(1).astype(np.float32),
        "p_agonist": np.where(t[:, 0] == 1, 0.9, 0.2).astype(np.float32),
    }


def _buffer():
    n = X0.shape[0]
    buf = diffusion.Buffer(
        tokens=X0,
        unmask_step=np.zeros_like(X0),
        valid=np.ones(X0.shape, bool),
        direction=np.where(np.arange(n) % 2 == 0, 1, -1).astype(np.int32),
        affinity=AFFINITY,
        p_agonist=P_AGONIST,
        reward=AFFINITY,
        log_ratio=np.zeros((n,), np.float32),
        log_w=LOG_W,
    )
    return jax.tree.map(jnp.asarray, buf)


def _best_of_n(**kw):
    f, p = _model()
    return diffusion.best_of_n(
        f, p, _oracle, n=4, num_out=2, length=L, direction=1,
        mask_id=MASK, num_steps=2, **{"key": jax.random.key(0), **kw},
    )  # fmt: skip


def _smc(**kw):
    f, p = _model()
    return diffusion.smc_sample(
        f, p, _oracle, num_particles=4, length=L, direction=1,
        mask_id=MASK, num_steps=2, **{"key": jax.random.key(0), **kw},
    )  # fmt: skip


def _collect(**kw):
    f, p = _model()
    return diffusion.collect_onpolicy(
        f, p, p, _oracle, num_samples=4, length=L, direction=1,
        mask_id=MASK, num_steps=2, **{"key": jax.random.key(0), **kw},
    )  # fmt: skip


def _fine_tune(**kw):
    f, p = _model()
    small = {"samples_per_iter": 4, "steps_per_iter": 1, "num_steps": 2, "buffer_size": 4}
    small.update(replicates=1, contrastive_weight=0.0)
    return diffusion.fine_tune(
        f, None, p, _oracle, direction=1, length=L, mask_id=MASK,
        optimizer=optax.sgd(1e-3), iterations=1, **{"key": jax.random.key(0), **small, **kw},
    )  # fmt: skip


def _rescore(**kw):
    f, p = _model()
    return diffusion.rescore_buffer(f, p, p, _buffer(), mask_id=MASK, num_steps=2, **kw)


def _td3b_loss(**kw):
    f, p = _model()
    return diffusion.td3b_loss(
        f, None, p, p, _buffer(), mask_id=MASK,
        **{"key": jax.random.key(0), "replicates": 1, "contrastive_weight": 0.0, **kw},
    )  # fmt: skip


def _td3b_step(**kw):
    f, p = _model()
    opt = optax.sgd(1e-3)
    return diffusion.td3b_train_step(
        f, None, opt, p, opt.init(p), p, _buffer(), mask_id=MASK,
        **{"key": jax.random.key(0), "replicates": 1, "contrastive_weight": 0.0, **kw},
    )  # fmt: skip


def _kl(**kw):
    f, p = _model()
    return diffusion.kl_to_reference(f, p, p, X0, mask_id=MASK, **{"key": jax.random.key(0), **kw})


def _keyed(name, *args, **fixed):
    """A recipe ``diffusion.<name>(apply_fn, params, *args, key=..., mask_id=MASK, **fixed, **kw)``.

    The function is looked up in the module at call time (the array sweep patches it there).
    """

    def call(**kw):
        f, p = _model()
        fn = getattr(diffusion, name)
        return fn(f, p, *args, mask_id=MASK, **{"key": jax.random.key(0), **fixed, **kw})

    return call


RECIPES = {
    "jaxkit.diffusion.best_of_n": _best_of_n,
    "jaxkit.diffusion.smc_sample": _smc,
    "jaxkit.diffusion.collect_onpolicy": _collect,
    "jaxkit.diffusion.fine_tune": _fine_tune,
    "jaxkit.diffusion.rescore_buffer": _rescore,
    "jaxkit.diffusion.log_likelihood_bound": _keyed("log_likelihood_bound", X0, num_samples=2),
    "jaxkit.diffusion.mdlm_loss": _keyed("mdlm_loss", X0),
    "jaxkit.diffusion.sample": _keyed("sample", TEMPLATE, num_steps=2),
    "jaxkit.diffusion.sir_resample": lambda **kw: diffusion.sir_resample(
        X0, AFFINITY, alpha=0.1, num_out=2, **{"key": jax.random.key(0), **kw}
    ),
    "jaxkit.diffusion.kl_to_reference": _kl,
    "jaxkit.diffusion.td3b_loss": _td3b_loss,
    "jaxkit.diffusion.td3b_train_step": _td3b_step,
    "jaxkit.diffusion.contrastive_margin": functools.partial(
        diffusion.contrastive_margin, EMB, LABELS
    ),
    "jaxkit.diffusion.gated_reward": functools.partial(
        diffusion.gated_reward, AFFINITY, P_AGONIST, direction=1
    ),
    "jaxkit.diffusion.log_importance_weight": functools.partial(
        diffusion.log_importance_weight, AFFINITY, P_AGONIST
    ),
    "jaxkit.diffusion.wdce_loss": _keyed("wdce_loss", X0, LOG_W, replicates=1),
    # a default passed explicitly: the array sweep reaches a function through a call that binds
    # an argument
    "jaxkit.diffusion.toy_nature": lambda **kw: diffusion.toy_nature(**{"seed": 0, **kw}),
    "jaxkit.diffusion.toy_nature_sample": functools.partial(diffusion.toy_nature_sample, 2, seed=0),
    "jaxkit.diffusion.MaskingSchedule": lambda **kw: diffusion.MaskingSchedule(
        **{"kind": "loglinear", **kw}
    ),
    "jaxkit.diffusion.reverse_step": _keyed("reverse_step", TEMPLATE, 0, num_steps=2),
    "jaxkit.diffusion.transformer_denoiser": functools.partial(diffusion.transformer_denoiser, CFG),
    "jaxkit.diffusion.transformer_embedder": functools.partial(diffusion.transformer_embedder, CFG),
    "jaxkit.diffusion.make_buffer": lambda **kw: diffusion.make_buffer(
        X0,
        np.zeros_like(X0),
        np.zeros((4,), np.float32),
        _oracle,
        direction=1,
        alpha=0.1,
        kappa_min=0.1,
        **kw,
    ),  # fmt: skip
    "jaxkit.diffusion.merge_best": lambda **kw: diffusion.merge_best(_buffer(), _buffer(), 3, **kw),
}


def _traj(**kw):
    f, p = _model()
    return diffusion.trajectory_log_prob(
        f, p, X0, np.zeros_like(X0), mask_id=MASK, num_steps=2, **kw
    )


RECIPES.update(
    {
        "jaxkit.diffusion.subs_log_probs": lambda **kw: diffusion.subs_log_probs(
            jnp.asarray(_rng.normal(size=(2, L, V + 1)).astype(np.float32)), MASK, **kw
        ),
        "jaxkit.diffusion.trajectory_log_prob": _traj,
        "jaxkit.diffusion.effective_sample_size": lambda **kw: diffusion.effective_sample_size(
            jnp.asarray(LOG_W), **kw
        ),
    }
)

# the schedule's methods (tests/arrays.py): times in (0, 1], `s` before `t`
SCHEDULE = diffusion.MaskingSchedule("cosine")
TIMES = np.array([0.25, 0.5, 1.0], np.float32)
RECIPES.update(
    {
        "jaxkit.diffusion.MaskingSchedule.alpha": lambda **kw: SCHEDULE.alpha(TIMES, **kw),
        "jaxkit.diffusion.MaskingSchedule.weight": lambda **kw: SCHEDULE.weight(TIMES, **kw),
        "jaxkit.diffusion.MaskingSchedule.unmask_probability": lambda **kw: (
            SCHEDULE.unmask_probability(TIMES, TIMES - 0.2, **kw)
        ),
    }
)

EXEMPT: dict[str, str] = {}

ANY_RANK: dict[str, str] = {
    "jaxkit.diffusion.MaskingSchedule.alpha:t": "elementwise: times of any shape (a scalar, "
    "one per row, [B, 1]), as the docstring says",
    "jaxkit.diffusion.MaskingSchedule.weight:t": "elementwise: times of any shape, as the "
    "docstring says",
    "jaxkit.diffusion.MaskingSchedule.unmask_probability:t": "elementwise: times of any shape "
    "that broadcasts with `s` (shapes that do not: a TypeError naming both)",
    "jaxkit.diffusion.MaskingSchedule.unmask_probability:s": "elementwise: times of any shape "
    "that broadcasts with `t`",
    "jaxkit.diffusion.subs_log_probs:logits": "[..., V]: any leading batch axes, as documented",
}

BROADCAST_OK: dict[str, str] = {
    "jaxkit.diffusion.wdce_loss:x0": "the sequence length L is free (it equals `log_w`'s N "
    "only in the recipe); the loss is a scalar for any L",
}

_BUFFER_DIRECTION = (
    "directions +1/-1 of any real dtype, as `contrastive_margin`'s `labels`; a value other "
    "than +1 or -1 (the probe's 1.5) is a ValueError naming `buffer.direction`"
)
_MERGED = (
    "whole rows copied (kept by reward), never looked up: merge_best takes no vocabulary and "
    "no `num_steps`; the buffer's consumers (`td3b_loss`, `td3b_train_step`, `rescore_buffer`) "
    "check tokens and steps against them"
)
_UNREAD_UNMASK_STEP = (
    "not read by the TD3B objective (WDCE and KL see the final tokens only); its range "
    "[-1, num_steps) needs the sampler's `num_steps`, which only `rescore_buffer` takes and "
    "checks (through `trajectory_log_prob`); its dtype is checked (a TypeError naming it)"
)

ANY_DTYPE: dict[str, str] = {
    "jaxkit.diffusion.contrastive_margin:labels": (
        "directions +1/-1 of any real dtype, as `direction` elsewhere; a value other than "
        "+1 or -1 (the probe's 1.5) is a ValueError under the guard (tests/diffusion/test_td3b.py)"
    ),
    "jaxkit.diffusion.rescore_buffer:buffer.direction": _BUFFER_DIRECTION,
    "jaxkit.diffusion.td3b_loss:buffer.direction": _BUFFER_DIRECTION,
    "jaxkit.diffusion.td3b_train_step:buffer.direction": _BUFFER_DIRECTION,
    "jaxkit.diffusion.merge_best:buffer.direction": _BUFFER_DIRECTION,
    "jaxkit.diffusion.merge_best:new.direction": _BUFFER_DIRECTION.replace("buffer.", "new."),
}

ANY_INT: dict[str, str] = {
    "jaxkit.diffusion.sir_resample:tokens": "token ids of whole rows that are only copied "
    "(resampled): no vocabulary is looked up, so any integer id is carried through",
    "jaxkit.diffusion.make_buffer:tokens": "stored as given and handed to the black-box "
    "oracle: the model's alphabet is not known here; the buffer's consumers (`td3b_loss`, "
    "`td3b_train_step`, `rescore_buffer`) check `buffer.tokens` against it",
    "jaxkit.diffusion.make_buffer:unmask_step": "stored as given: its range [-1, num_steps) "
    "needs `num_steps`, which make_buffer does not take; its one consumer, `rescore_buffer` "
    "(through `trajectory_log_prob`), checks it against `num_steps`",
    "jaxkit.diffusion.td3b_loss:buffer.unmask_step": _UNREAD_UNMASK_STEP,
    "jaxkit.diffusion.td3b_train_step:buffer.unmask_step": _UNREAD_UNMASK_STEP,
    **{
        f"jaxkit.diffusion.merge_best:{b}.{f}": _MERGED
        for b in ("buffer", "new")
        for f in ("tokens", "unmask_step")
    },  # fmt: skip
}
