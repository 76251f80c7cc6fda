"""Row helpers of the host-side TD3B loop (:func:`fine_tune`, :func:`make_buffer`).

The objectives, the check of :func:`make_buffer`'s rows, the reward an objective tilts
by, the :class:`Buffer` of scored rows with their importance weights, the rows of a
proposal window with log-ratios against the window's mixture, and the direction
accuracy under a buffer's normalised weights. Host-side, not jitted.
"""

import jax.numpy as jnp
import numpy as np

from jaxkit import _validate
from jaxkit.diffusion._rescore import trajectory_log_prob
from jaxkit.diffusion._step import Buffer
from jaxkit.diffusion._td3b import gated_reward, log_importance_weight

OBJECTIVES = ("td3b", "affinity")


def _check_rows(tokens, unmask_step, log_ratio) -> None:
    """:func:`make_buffer`'s rows: ``int[N, L]`` tokens and unmasking steps, ``log_ratio [N]``."""
    _validate.integer(tokens, name="tokens")
    _validate.ndim(tokens, 2, name="tokens")
    _validate.integer(unmask_step, name="unmask_step")
    _validate.shape(unmask_step, jnp.shape(tokens), name="unmask_step")
    _validate.real(log_ratio, name="log_ratio")
    _validate.shape(log_ratio, jnp.shape(tokens)[:1], name="log_ratio")


def _reward(g, f, direction, objective):
    """The reward the objective tilts by: gated (TD3B) or affinity alone."""
    if objective == "affinity":
        return jnp.asarray(g)
    d = jnp.full((g.shape[0],), direction, jnp.int32)
    return gated_reward(jnp.asarray(g), jnp.asarray(f), direction=d)


def _buffer(tokens, unmask_step, log_ratio, g, f, direction, alpha, kappa_min, objective):
    _validate.one_of(OBJECTIVES, objective=objective)
    d = jnp.full((g.shape[0],), direction, jnp.int32)
    s = _reward(g, f, direction, objective)
    kappa_min = 1.0 if objective == "affinity" else kappa_min
    lw = log_importance_weight(
        s,
        jnp.asarray(f),
        log_ratio=jnp.asarray(log_ratio, jnp.float32),
        alpha=alpha,
        kappa_min=kappa_min,
    )
    tokens = jnp.asarray(tokens, jnp.int32)
    return Buffer(
        tokens=tokens,
        unmask_step=jnp.asarray(unmask_step, jnp.int32),
        valid=jnp.ones_like(tokens, dtype=bool),
        direction=d,
        affinity=jnp.asarray(g),
        p_agonist=jnp.asarray(f),
        reward=s,
        log_ratio=jnp.asarray(log_ratio, jnp.float32),
        log_w=lw,
    )


def _mixture_rows(past, window, it, params, tr, g, f, apply_fn, mask_id, num_steps, keep_first):
    """The window's rows and their log-ratios against the window's mixture (host).

    ``past`` holds one dict per batch (its trajectory, oracle values, ``log p_pre`` of
    the path and ``lp``: its path log-probability under each policy of the window, by
    iteration); it is updated in place (the new batch in, the oldest out; with
    ``keep_first`` the oldest after the first, which stays). Returns
    ``(tokens, unmask_step, log_ratio, g, f)`` over the window's rows.
    """
    log_pre = np.asarray(tr.log_ratio, np.float64) + np.asarray(tr.log_prob, np.float64)
    past.append({"it": it, "params": params, "tr": tr, "g": g, "f": f, "pre": log_pre, "lp": {}})
    if len(past) > window:
        past[:] = [*past[:1], *past[1 - window :]] if keep_first else past[-window:]
    its = [pol["it"] for pol in past]
    for b in past:
        b["lp"] = {j: v for j, v in b["lp"].items() if j in its}
        for pol in past:
            if pol["it"] not in b["lp"]:
                lp = trajectory_log_prob(
                    apply_fn,
                    pol["params"],
                    b["tr"].tokens,
                    b["tr"].unmask_step,
                    mask_id=mask_id,
                    num_steps=num_steps,
                )
                b["lp"][pol["it"]] = np.asarray(lp, np.float64)
    lp = np.stack([np.concatenate([b["lp"][j] for b in past]) for j in its])
    log_mix = np.logaddexp.reduce(lp, axis=0) - np.log(len(past))
    log_ratio = (np.concatenate([b["pre"] for b in past]) - log_mix).astype(np.float32)
    tokens, steps = (
        np.concatenate([np.asarray(getattr(b["tr"], n)) for b in past])
        for n in ("tokens", "unmask_step")
    )
    g, f = (np.concatenate([b[n] for b in past]) for n in ("g", "f"))
    return tokens, steps, log_ratio, g, f


def _weighted_hits(buffer: Buffer, direction: int) -> float:
    """The direction accuracy the training buffer's normalised weights put on ``d*``."""
    lw = np.asarray(buffer.log_w, np.float64)
    w = np.exp(lw - lw.max())
    hit = (np.asarray(buffer.p_agonist) >= 0.5) == (direction > 0)
    return float(np.sum(w * hit) / np.sum(w))
