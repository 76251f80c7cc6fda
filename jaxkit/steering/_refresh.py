"""SVGT generation with the EMA bridge refresh (``cfg.refresh_every = R > 0``).

Every R decode steps the bridge is rebuilt from the *current* token (its block-``l``
hidden is the trigger; the value encoder reads the block-``l`` hidden states of the
prompt and of the tokens generated so far) and smoothed,
``b <- ema * b + (1 - ema) * b_new``. The step's logits then come from the sequence
``[prompt ; b ; generated]``, so generation means the same thing with and without
the cache:

* ``"recompute"``: every step runs the blocks ``<= l`` on ``[prompt ; generated]``
  (gapped positions), refreshes the bridge on the refresh steps, inserts it and runs
  the blocks ``> l`` (no cache; the oracle).
* ``"cached"``: one token per step through the KV cache; on a refresh step the K/V
  of every position that reads the bridge are rewritten exactly: a chunk forward of
  ``[b ; block-l hidden of the generated tokens]`` through blocks ``l+1..N-1`` at
  slots ``M..`` over the cached prompt (the block-``l`` hidden of a generated token
  never depends on the bridge, which is hidden below ``l``, so it is kept from its
  own step). The current token is in the chunk, so its logits are re-run with the
  new bridge.

Two defects of the authors' code are not copied: their recompute refresh uses the
last prompt token as the trigger (a no-op, the bridge is static), and their cached
refresh writes ``k_proj(b)``/``v_proj(b)`` into every block above ``l`` (no norms,
no intervening blocks; the generated tokens' K/V keep reading the old bridge).
"""

import jax
import jax.numpy as jnp

from jaxkit import nn
from jaxkit._tokens import step_key
from jaxkit.steering._svgt import (
    _insert,
    edited_bridge,
    gapped_positions,
    lower_pass,
    make_bridge,
)


def _ema(b, b_new, beta):
    return beta * b + (1.0 - beta) * b_new


def recompute_refresh(lm_params, vp, prompt, prompt_len, key, choose, *, lm_cfg, cfg, n, iv=None):
    """The uncached generator with the refresh: ``(tokens [B, N], logits [B, N, V])``.

    ``iv``: the user's edits (``nn.Interventions``, edits only), in every pass.
    """
    b, p = prompt.shape
    k, layer, r = cfg.n_bridge, cfg.layer, cfg.refresh_every
    buf = jnp.pad(prompt, ((0, 0), (0, n)))  # pads keep the prompts' (batch) sharding
    cols = jnp.arange(p + n, dtype=jnp.int32)[None, :]
    pos = gapped_positions(prompt_len, p + n, k)

    def logits_at(buf, bridge, s):
        h = lower_pass(lm_params, lm_cfg, buf, pos, layer, interventions=iv).h
        valid = prompt_len + s
        new, _ = make_bridge(vp, cfg, h, valid)
        bridge = jnp.where((s > 0) & (s % r == 0), _ema(bridge, new, cfg.ema), bridge)
        hx, posx = _insert(h, edited_bridge(bridge, iv, layer, h.dtype), prompt_len)
        up = nn.run_layers(lm_params, lm_cfg, hx, posx, start=layer + 1, interventions=iv).h
        x = jnp.take_along_axis(up, (prompt_len + k - 1 + s)[:, None, None], axis=1)
        return nn.unembed(lm_params, lm_cfg, x)[:, 0], bridge

    h0 = lower_pass(lm_params, lm_cfg, buf, pos, layer, interventions=iv).h
    bridge0, _ = make_bridge(vp, cfg, h0, prompt_len)

    def body(s, c):
        buf, out, bridge, lg = c
        logits, bridge = logits_at(buf, bridge, s)
        tok = choose(logits, step_key(key, s))
        lg = lg.at[:, s].set(logits.astype(jnp.float32))
        buf = jnp.where(cols == (prompt_len + s)[:, None], tok[:, None], buf)
        return buf, out.at[:, s].set(tok), bridge, lg

    zb = jnp.zeros_like(prompt_len)  # batch-shaped arrays keep the prompts' sharding
    lg0 = (zb[:, None, None] + jnp.zeros((1, n, lm_cfg.vocab_size), jnp.int32)).astype(jnp.float32)
    init = (buf, zb[:, None] + jnp.zeros((1, n), jnp.int32), bridge0, lg0)
    _, out, _, lg = jax.lax.fori_loop(0, n, body, init)
    return out, lg


def cached_refresh(lm_params, vp, prompt, prompt_len, key, choose, *, lm_cfg, cfg, n, iv=None):
    """The cached generator with the exact refresh: ``(tokens [B, N], logits [B, N, V])``.

    ``iv``: the user's edits (``nn.Interventions``, edits only), in every pass.
    """
    b, p = prompt.shape
    k, layer, r = cfg.n_bridge, cfg.layer, cfg.refresh_every
    s_cap = p + k + n
    ar = jnp.arange(p, dtype=jnp.int32)
    h_p = lower_pass(
        lm_params, lm_cfg, prompt, jnp.broadcast_to(ar, (b, p)), layer, interventions=iv
    ).h
    bridge, _ = make_bridge(vp, cfg, h_p, prompt_len)
    # the prompt with K reserved slots after M_b; the bridge enters after block l
    j = jnp.arange(p + k, dtype=jnp.int32)[None, :]
    src = jnp.clip(jnp.where(j < prompt_len[:, None], j, j - k), 0, p - 1)
    reserved = jnp.take_along_axis(prompt, src, axis=1)
    ins = nn.Interventions(insert_layer=layer, insert_at=prompt_len, latents=bridge)
    logits, cache = nn.prefill(
        lm_params,
        lm_cfg,
        reserved,
        prompt_len + k,
        max_len=s_cap,
        interventions=nn.combine_interventions(iv, ins),
    )
    mask_iv = nn.combine_interventions(
        iv, nn.Interventions(insert_layer=layer, insert_at=prompt_len, n_insert=k)
    )
    # block-l hidden of every committed slot (prompt, then generated tokens); the
    # reserved slots are never read (the value encoder's mask leaves them out)
    hbuf = jnp.pad(h_p, ((0, 0), (0, s_cap - p), (0, 0)))  # keeps the batch sharding
    tok0 = choose(logits, step_key(key, 0))
    chunk = k + n - 1  # slots M .. M+K+N-2: the bridge and every generated token
    slot = jnp.arange(s_cap, dtype=jnp.int32)[None, :]
    cj = jnp.arange(chunk, dtype=jnp.int32)[None, :]

    def refresh(args):
        cache, hbuf, bridge, at = args
        # the encoder reads the prompt and the generated tokens up to the current one
        m = prompt_len[:, None]
        seen = (slot < m) | ((slot >= m + k) & (slot <= at[:, None]))
        # a compact view in which the current token is row prompt_len + s - 1: the
        # gapped slots hold the generated tokens after the K reserved ones
        src = jnp.where(slot < m, slot, slot + k)
        comp = jnp.take_along_axis(hbuf, jnp.clip(src, 0, s_cap - 1)[:, :, None], axis=1)
        cmask = jnp.take_along_axis(seen, jnp.clip(src, 0, s_cap - 1), axis=1) & (src < s_cap)
        n_valid = at - k + 1  # compact index of the current token + 1
        new, _ = make_bridge(vp, cfg, comp, n_valid, mask=cmask)
        bridge = _ema(bridge, new, cfg.ema)
        x = jnp.take_along_axis(hbuf, jnp.clip(m + cj, 0, s_cap - 1)[:, :, None], axis=1)
        br = edited_bridge(bridge, iv, layer, x.dtype)
        x = jnp.where((cj < k)[:, :, None], jnp.pad(br, ((0, 0), (0, chunk - k), (0, 0))), x)
        up = nn.run_layers(
            lm_params,
            lm_cfg,
            x,
            prompt_len[:, None] + cj,
            start=layer + 1,
            cache=cache._replace(length=prompt_len),
            overflow="drop",
            interventions=iv,
        )
        hx = jnp.take_along_axis(up.h, (at - prompt_len)[:, None, None], axis=1)
        logits = nn.unembed(lm_params, lm_cfg, hx)[:, 0]
        return logits, up.cache._replace(length=cache.length), bridge

    def plain(args):
        cache, hbuf, bridge, at = args
        x = jnp.take_along_axis(hbuf, at[:, None, None], axis=1)
        up = nn.run_layers(
            lm_params,
            lm_cfg,
            x,
            at[:, None],
            start=layer + 1,
            cache=cache,
            overflow="drop",
            interventions=iv,
        )
        return nn.unembed(lm_params, lm_cfg, up.h)[:, 0], up.cache, bridge

    def body(s, c):
        cache, hbuf, bridge, tok, out, lg = c
        at = cache.length  # the current token's slot (= its logical position)
        low = lower_pass(
            lm_params, lm_cfg, tok[:, None], at[:, None], layer, cache=cache, interventions=mask_iv
        )
        hbuf = jnp.where((slot == at[:, None])[:, :, None], low.h, hbuf)
        logits, cache, bridge = jax.lax.cond(
            s % r == 0, refresh, plain, (low.cache, hbuf, bridge, at)
        )
        tok = choose(logits, step_key(key, s))
        out, lg = out.at[:, s].set(tok), lg.at[:, s].set(logits.astype(jnp.float32))
        return nn.commit(cache, jnp.ones_like(at)), hbuf, bridge, tok, out, lg

    out = jnp.pad(tok0[:, None], ((0, 0), (0, n - 1)))
    lg = jnp.pad(logits.astype(jnp.float32)[:, None], ((0, 0), (0, n - 1), (0, 0)))
    init = (cache, hbuf, bridge, tok0, out, lg)
    _, _, _, _, out, lg = jax.lax.fori_loop(1, n, body, init)
    return out, lg
