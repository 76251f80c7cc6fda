"""The adaptive window of :func:`wedlm_generate`: AR fallback steps and the probe schedule.

When the tokens decided per window forward stay below ``min_accept``, the decoder runs
one-token steps (the body of :func:`ar_generate`'s loop, the cost of an AR step) and
probes the window again after a gap that doubles after each failed probe. The loop
state is :class:`jaxkit.decoding.WeDLMState`; its settings are the decoder's options.
"""

import jax
import jax.numpy as jnp

from jaxkit.decoding._common import ar_step, step_key, stop_info, write_at
from jaxkit.decoding._reorder import commit_count


def set_slot0(s, tok, new0, prompt_len, o, *, active):
    """Decide slot 0 as ``tok`` where ``new0`` (an open slot of an active row), emit, stop."""
    n = o.max_new_tokens
    gen0 = s.cache.length - prompt_len
    new0 = new0 & ~s.filled[:, 0] & active & (gen0 < n)
    slot0 = jnp.arange(s.win_tok.shape[1])[None, :] == 0
    win_tok = jnp.where(slot0 & new0[:, None], tok[:, None], s.win_tok)
    filled = s.filled | (slot0 & new0[:, None])
    out = write_at(s.out, jnp.where(new0, gen0, n)[:, None], tok[:, None])
    n_gen = jnp.where(active, jnp.minimum(gen0 + commit_count(filled), n), s.n_gen)
    has_stop, _ = stop_info(out, n_gen, o.stop_token_ids)
    done = s.done | (n_gen >= n) | has_stop
    return s._replace(win_tok=win_tok, filled=filled, out=out, n_gen=n_gen, done=done)


def use_single(s, o):
    """Run AR steps: every active row is below ``min_accept`` with slot 0 decided."""
    low = (s.accept < o.min_accept) & s.filled[:, 0]
    return jnp.all(low | s.done) & (s.since < s.gap)


def ar_run(params, cfg, s, prompt_len, key, o, go=None):
    """The fallback: up to ``s.gap`` AR steps (the body of ``ar_generate``'s loop).

    Slot 0's decided token is fed alone (one ``nn.decode_step``), committed, and the
    next token drawn from the next-token head; other decided slots are dropped.
    ``go``: optional traced bool; when False no step runs and ``s`` is returned as is.
    """
    n, cap = o.max_new_tokens, 2 * (o.max_new_tokens + o.window + 1)
    active = ~s.done
    n_gen = jnp.where(active, jnp.minimum(s.cache.length - prompt_len + 1, n), s.n_gen)

    def cond(c):
        more = jnp.any(~c[4]) & (c[7] < s.gap) & (c[6] < cap)
        return more if go is None else more & go

    def body(c):
        rows, i, k = c[5:]
        ki = step_key(key, i)
        state, act = ar_step(params, cfg, c[:5], ki, o.sampling, static=o, overflow="drop", iv=o.iv)
        return (*state, rows + act.astype(jnp.int32), i + 1, k + 1)

    carry = (s.cache, s.win_tok[:, 0], s.out, n_gen, s.done, s.row_forwards, s.n_forward, 0)
    cache, tok, out, n_gen, done, rows, i, _ = jax.lax.while_loop(cond, body, carry)
    first = jnp.arange(s.win_tok.shape[1])[None, :] == 0
    win_tok = jnp.where(first, tok[:, None], jnp.full_like(s.win_tok, o.mask_token_id))
    filled, since = first | jnp.zeros_like(s.filled), s.gap
    if go is not None:  # zero trips leave cache, out, done and the counters as they were
        win_tok, filled = jnp.where(go, win_tok, s.win_tok), jnp.where(go, filled, s.filled)
        n_gen, since = jnp.where(go, n_gen, s.n_gen), jnp.where(go, since, s.since)
    return s._replace(
        cache=cache,
        win_tok=win_tok,
        filled=filled,
        out=out,
        n_gen=n_gen,
        done=done,
        row_forwards=rows,
        n_forward=i,
        since=since,
    )


def schedule(accept, decided, was_done, done, since, gap, min_accept, probe_every: int, n: int):
    """Acceptance average and probe gap after a window step that decided ``decided`` tokens.

    ``accept <- (accept + decided) / 2`` on the rows that took part; a window step run
    after one-token steps (``since > 0``) that leaves every active row below
    ``min_accept`` is a failed probe and doubles the gap (at most ``n``); a step above
    it resets the gap to ``probe_every``.
    """
    accept = jnp.where(was_done, accept, 0.5 * accept + 0.5 * decided.astype(jnp.float32))
    low = jnp.all((accept < min_accept) | done)
    doubled = jnp.minimum(2 * gap, n)
    gap = jnp.where(low & (since > 0), doubled, jnp.where(low, gap, probe_every))
    return accept, gap.astype(jnp.int32)
