"""The small PST model: stage scores, loss composition, finite gradients with padding."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxkit import retrieval
from jaxkit.retrieval import _model as M
from jaxkit.retrieval import _synthetic as S


@pytest.mark.slow
def test_pst_loss_composition_and_gradients():
    d = retrieval.synthetic_motion_text(4, key=jax.random.key(0), length=16, max_segments=2)
    cfg = M.PSTConfig(
        vocab_size=len(S.WORDS), length=16, n_windows=2, n_phrases=2, dim=8, n_layers=1, n_heads=2
    )
    p = M.pst_init(cfg, key=jax.random.key(1))
    args = (
        jnp.asarray(d.motion),
        jnp.asarray(d.tokens),
        jnp.asarray(d.token_mask),
        jnp.asarray(d.word_segment),
        jnp.zeros((4, 4), bool),
    )
    full = jnp.array([1.0, 1.0, 0.5])

    @jax.jit
    def run(q):
        scores = M.pst_scores(q, cfg, *args[:4])
        loss0 = M.pst_loss(q, cfg, *args, jnp.zeros(3))[0]
        (loss, aux), g = jax.value_and_grad(
            lambda r: M.pst_loss(r, cfg, *args, full), has_aux=True
        )(q)
        return scores, loss0, loss, aux, g

    scores, loss0, loss, aux, g = run(p)
    assert scores.shape == (3, 4, 4) and bool(jnp.all(jnp.isfinite(scores)))
    # weights 0: the loss is the global InfoNCE of the global cosine scores
    assert abs(float(loss0) - float(retrieval.info_nce(scores[2], tau=0.1))) < 1e-5
    want = (
        aux["nce_global"]
        + retrieval.info_nce(scores[0], tau=0.1)
        + retrieval.info_nce(scores[1], tau=0.1)
        + aux["l_st"]
        + 0.5 * aux["l_pyr"]
    )
    assert abs(float(loss) - float(want)) < 1e-4
    leaves = [np.asarray(x) for x in jax.tree.leaves(g)]
    assert all(np.all(np.isfinite(x)) for x in leaves)
    assert any(np.any(x != 0) for x in leaves)
