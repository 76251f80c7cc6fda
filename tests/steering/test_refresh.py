"""SVGT's EMA bridge refresh during generation and the attention-pooling variant."""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxkit import steering
from jaxkit.steering._modules import pool_attention
from jaxkit.steering._refresh import cached_refresh, recompute_refresh
from tests.steering._setup import CFG, PLEN, PROMPT, SC, VP, P

N = 7


def _greedy(logits, key):
    del key
    return jnp.argmax(logits, -1).astype(jnp.int32)


_JIT = {
    g: jax.jit(g, static_argnames=("choose", "lm_cfg", "cfg", "n"))
    for g in (cached_refresh, recompute_refresh)
}
# l = 0: two blocks above l, so a generated token's K/V in the top block read the
# bridge (a refresh that rewrote only the bridge's rows would fail the oracle)
SR = SC._replace(layer=0, refresh_every=2, ema=0.5)  # refreshes at steps 2, 4, 6


def _run(gen, cfg):
    """(tokens [B, N], logits [B, N, V]) of a refreshing generator (greedy)."""
    key = jax.random.key(0)
    return _JIT[gen](P, VP, PROMPT, PLEN, key, choose=_greedy, lm_cfg=CFG, cfg=cfg, n=N)


def test_cached_refresh_equals_the_uncached_recomputation():
    # the cache rewrites the bridge's K/V and every generated token's K/V above l;
    # recompute runs the whole sequence every step
    tok_c, lg_c = _run(cached_refresh, SR)
    tok_r, lg_r = _run(recompute_refresh, SR)
    np.testing.assert_array_equal(tok_c, tok_r)
    np.testing.assert_allclose(lg_c, lg_r, atol=2e-5, rtol=1e-5)


@pytest.mark.slow
def test_refresh_moves_the_logits_and_ema_one_is_no_refresh():
    _, lg = _run(cached_refresh, SR)
    _, lg_none = _run(cached_refresh, SR._replace(refresh_every=N + 1))  # never refreshes
    # the refresh moved the logits (else the oracle above proves nothing), only after
    # the first refresh
    assert np.max(np.abs(np.asarray(lg[:, 2:] - lg_none[:, 2:]))) > 1e-3
    np.testing.assert_allclose(lg[:, :2], lg_none[:, :2], atol=1e-6)
    # beta = 1 keeps the bridge; the exact rewrite then restores the same K/V
    _, lg_one = _run(cached_refresh, SR._replace(ema=1.0))
    np.testing.assert_allclose(lg_one, lg_none, atol=2e-5, rtol=1e-5)
    # and the public generator without a refresh (its own prefill and loop) agrees
    kw = dict(key=jax.random.key(0), max_new_tokens=N)
    static = steering.svgt_generate(P, CFG, VP, SC, PROMPT, PLEN, **kw).tokens
    refreshed = steering.svgt_generate(
        P, CFG, VP, SC._replace(refresh_every=2, ema=1.0), PROMPT, PLEN, **kw
    ).tokens
    np.testing.assert_array_equal(refreshed, static)


def test_attention_pooling_weights_only_valid_positions():
    rng = np.random.default_rng(3)
    x = jnp.asarray(rng.normal(size=(2, 5, 8)), jnp.float32)
    mask = jnp.asarray([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]], bool)
    enc = steering.init_svgt(
        CFG, SC._replace(pooling="attention", value_dim=8), key=jax.random.key(0)
    ).encoder
    # a zero query scores every position alike: the mean of the valid rows
    zero = pool_attention(x, mask, jnp.zeros(8), enc.pool_key)
    np.testing.assert_allclose(zero[0], np.mean(np.asarray(x)[0, :3], 0), rtol=1e-6)
    np.testing.assert_allclose(zero[1], np.mean(np.asarray(x)[1], 0), rtol=1e-6)
    # the learned query: a softmax of <wk x_t, q> / sqrt(d) over the valid rows
    q = jnp.asarray(rng.normal(size=8), jnp.float32)
    got = pool_attention(x, mask, q, enc.pool_key)
    s = np.asarray(enc.pool_key(x)) @ np.asarray(q) / np.sqrt(8)
    w = np.exp(s[0, :3] - s[0, :3].max())
    np.testing.assert_allclose(got[0], (w / w.sum()) @ np.asarray(x)[0, :3], rtol=1e-5)


def test_attention_pooling_encoder_ignores_padding_and_trains_its_query():
    sc = SC._replace(pooling="attention")
    enc = steering.init_svgt(CFG, sc, key=jax.random.key(1)).encoder
    assert enc.pool_query.shape == (sc.value_dim,)
    assert steering.init_svgt(CFG, SC, key=jax.random.key(1)).encoder.pool_query is None
    rng = np.random.default_rng(4)
    h = jnp.asarray(rng.normal(size=(2, 6, CFG.d_model)), jnp.float32)
    mask = jnp.arange(6)[None] < jnp.array([4, 6])[:, None]

    @eqx.filter_jit
    def run(enc, h):
        z = enc.trigger(h, mask)
        z2 = enc.trigger(h.at[0, 4:].set(99.0), mask)  # row 0's padding changes
        z3 = enc.trigger(h.at[0, 1].add(1.0), mask)  # a valid row changes
        g = jax.grad(lambda e: jnp.sum(e.trigger(h, mask) ** 2))(enc)
        return z, z2, z3, g

    z, z2, z3, g = run(enc, h)
    np.testing.assert_allclose(z2, z, atol=1e-6)
    assert np.any(np.abs(np.asarray(z3 - z)[0]) > 1e-4)
    assert np.any(np.asarray(g.pool_query) != 0) and np.any(np.asarray(g.pool_key.w) != 0)


def test_bad_refresh_and_pooling_config():
    key = jax.random.key(0)
    with pytest.raises(ValueError, match="pooling"):
        steering.init_svgt(CFG, SC._replace(pooling="max"), key=key)
    with pytest.raises(ValueError, match="refresh_every"):
        steering.init_svgt(CFG, SC._replace(refresh_every=-1), key=key)
    with pytest.raises(ValueError, match="ema"):
        steering.init_svgt(CFG, SC._replace(ema=1.5), key=key)
    with pytest.raises(ValueError, match="ema"):
        steering.svgt_generate(
            P,
            CFG,
            VP,
            SC._replace(refresh_every=2, ema=-0.1),
            PROMPT,
            PLEN,
            key=key,
            max_new_tokens=2,
        )


def test_attention_pooled_adapter_round_trips(tmp_path):
    vp = steering.init_svgt(CFG, SC._replace(pooling="attention"), key=jax.random.key(2))
    steering.save_adapter(tmp_path / "a", vp)
    like = steering.init_svgt(CFG, SC._replace(pooling="attention"), key=jax.random.key(3))
    back = steering.restore_adapter(tmp_path / "a", like)
    assert eqx.tree_equal(back, vp)
