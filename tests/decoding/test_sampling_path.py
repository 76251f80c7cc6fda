"""The decoders draw their tokens through the fused sampler (kernels.sampling).

* sampled first tokens follow ``filtered_probabilities`` of the model's logits
  (chi-square, sized so that a false failure has probability < 1e-4 per decoder);
* (the same key gives the same tokens: ``test_wedlm.test_sampled_decoding_is_keyed...``);
* bad types raise TypeError, bad values ValueError; traced bad sampler values raise
  under ``jit``.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import stats as sps

from jaxkit import nn
from jaxkit.decoding import ar_generate, wedlm_generate
from jaxkit.kernels.sampling import filtered_probabilities
from tests.decoding._models import MASK, V, prompts, tiny

B = 4000  # rows sharing one prompt: independent draws of the first token
SAMPLER = dict(temperature=0.9, top_k=6, top_p=0.95, min_p=0.02)
ALPHA = 1e-4


@pytest.fixture(scope="module")
def model():
    params, cfg = tiny(21, layers=1, sharpen=1.5)
    pr, _ = prompts(21, 1, 4, [4])
    return params, cfg, pr


def _chi2_pvalue(tokens, q):
    counts = np.bincount(np.asarray(tokens), minlength=len(q)).astype(np.float64)
    assert counts[q == 0].sum() == 0, "sampled a token the filters remove"
    keep = q > 0
    assert keep.sum() >= 3, "the test needs a spread distribution"
    exp = len(tokens) * q[keep] / q[keep].sum()  # (q is f32: renormalise in f64)
    assert exp.min() >= 5
    return float(sps.chisquare(counts[keep], exp).pvalue)


# slow: the default run keeps the keyed-sampling decoder test and the sampler's own
# chi-square (tests/kernels_sampling); this one re-checks the law through both decoders
@pytest.mark.slow
def test_first_token_frequencies_match_filtered_distribution(model):
    params, cfg, pr = model
    prb = jnp.broadcast_to(pr, (B, pr.shape[1]))
    pl = jnp.full((B,), pr.shape[1], jnp.int32)
    key = jax.random.key(5)
    # one causal forward of [prompt, MASK]: position 3 sees the prompt only (the AR
    # next-token logits), position 4 is WeDLM's first mask slot at W=1
    seq = jnp.concatenate([pr, jnp.full((1, 1), MASK, jnp.int32)], axis=1)
    logits = nn.apply(params, cfg, seq, jnp.arange(5)[None]).logits[0]
    logits_ar, logits_we = logits[-2], logits[-1]
    q_ar = np.asarray(filtered_probabilities(logits_ar, **SAMPLER), np.float64)
    toks = ar_generate(params, cfg, prb, pl, key=key, max_new_tokens=1, **SAMPLER).tokens
    assert _chi2_pvalue(toks[:, 0], q_ar) > ALPHA
    # WeDLM at W=1: the first slot is a [MASK] after the prompt, filled in the prefill
    q_we = np.asarray(filtered_probabilities(logits_we, **SAMPLER), np.float64)
    out = wedlm_generate(
        params,
        cfg,
        prb,
        pl,
        key=key,
        mask_token_id=MASK,
        max_new_tokens=1,
        window=1,
        entropy_threshold=None,
        **SAMPLER,
    )
    assert _chi2_pvalue(out.tokens[:, 0], q_we) > ALPHA
    # power: the unfiltered distribution is rejected (the filters remove mass)
    s = np.asarray(logits_we, np.float64) / SAMPLER["temperature"]
    plain = np.exp(s - s.max()) / np.exp(s - s.max()).sum()
    counts = np.bincount(np.asarray(out.tokens[:, 0]), minlength=V)
    assert sps.chisquare(counts, B * plain).pvalue < ALPHA


def test_argument_errors(model):
    params, cfg, pr = model
    pl = jnp.asarray([4], jnp.int32)
    key = jax.random.key(0)

    def ar(**kw):
        return ar_generate(params, cfg, pr, pl, key=key, **({"max_new_tokens": 2} | kw))

    def we(**kw):
        base = {"max_new_tokens": 2, "window": 2, "mask_token_id": MASK}
        return wedlm_generate(params, cfg, pr, pl, key=key, **(base | kw))

    for gen in (ar, we):
        for kw, err, name in [
            (dict(max_new_tokens=True), TypeError, "max_new_tokens"),
            (dict(max_new_tokens=2.0), TypeError, "max_new_tokens"),
            (dict(max_new_tokens=0), ValueError, "max_new_tokens"),
            (dict(max_len="9"), TypeError, "max_len"),
            (dict(pad_token_id=1.0), TypeError, "pad_token_id"),
            (dict(temperature=-1.0), ValueError, "temperature"),
            (dict(temperature=float("nan")), ValueError, "temperature"),
            (dict(temperature="1"), TypeError, "temperature"),
            (dict(top_p=float("nan")), ValueError, "top_p"),
            (dict(min_p=1.5), ValueError, "min_p"),
            (dict(top_k=0), ValueError, "top_k"),
            (dict(top_k=1.5), TypeError, "top_k"),
        ]:
            # (under the test suite's jaxtyping hook a wrong annotation type is already a
            # TypeError naming the parameter; the library's own check names it too)
            with pytest.raises(err, match=name):
                gen(**kw)
    with pytest.raises(TypeError, match="`window`"):
        we(window=True)
    with pytest.raises(TypeError, match="mask_token_id"):
        we(mask_token_id=float(MASK))


def test_traced_bad_temperature_raises_under_jit(model):
    params, cfg, pr = model
    pl = jnp.asarray([4], jnp.int32)
    key = jax.random.key(0)

    def we(t):
        return wedlm_generate(
            params,
            cfg,
            pr,
            pl,
            key=key,
            mask_token_id=MASK,
            max_new_tokens=1,
            window=1,
            temperature=t,
        ).tokens

    def ar(t):
        return ar_generate(params, cfg, pr, pl, key=key, max_new_tokens=1, temperature=t).tokens

    for f in (we, ar):
        jf = jax.jit(f)
        if f is we:  # a traced temperature 0 goes through the sampler: the arg-max, the
            # same tokens as the static greedy mode of a concrete 0
            np.testing.assert_array_equal(jf(0.0), f(0.0))
        for bad in (-0.5, float("nan")):
            with pytest.raises(Exception, match="temperature"):
                jax.block_until_ready(jf(bad))
