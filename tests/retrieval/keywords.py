"""Keyword-sweep recipes for retrieval (see tests/keywords.py)."""

import functools
import pathlib
import tempfile

import jax
import jax.numpy as jnp
import numpy as np

from jaxkit import retrieval

_rng = np.random.default_rng(0)
TABLE = _rng.normal(size=2**3).astype(np.float32)  # a value per coalition of 3 players
TOKENS = _rng.normal(size=(6, 3)).astype(np.float32)
SCORES = _rng.normal(size=(4, 4)).astype(np.float32)
LOCAL = _rng.normal(size=(2, 4, 4)).astype(np.float32)
SIM = _rng.normal(size=(3, 2)).astype(np.float32)
PHI = _rng.normal(size=(3, 2)).astype(np.float32)
MASK_A = np.array([True, True, False])
MASK_B = np.array([True, True])
_E = _rng.normal(size=(8, 5))
_E /= np.linalg.norm(_E, axis=1, keepdims=True)
SELFSIM = (_E @ _E.T).astype(np.float32)
SIMS = (np.eye(8) + 0.1 * _rng.normal(size=(8, 8))).astype(np.float32)
W_A = _rng.normal(size=(3,)).astype(np.float32)
W_B = _rng.normal(size=(2,)).astype(np.float32)
ASSIGN = np.arange(6, dtype=np.int32) % 2
LOG_W = _rng.normal(size=(6,)).astype(np.float32)
M_TOK = _rng.normal(size=(2, 3, 4)).astype(np.float32)  # motion tokens [bm, na, d]
T_TOK = _rng.normal(size=(2, 2, 4)).astype(np.float32)  # text tokens [bt, nb, d]


def _value(t, m):
    """A coalition's value: the table entry at the mask's binary index."""
    return t[jnp.sum(jnp.where(m, 2 ** jnp.arange(m.shape[-1]), 0))]


def _key():
    return jax.random.key(0)


def _load(**kw):
    """A HumanML3D-layout folder with one id (whole clip, one caption)."""
    with tempfile.TemporaryDirectory() as d:
        root = pathlib.Path(d)
        for sub in ("texts", "new_joints", "new_joint_vecs"):
            (root / sub).mkdir()
        (root / "test.txt").write_text("000001\n")
        np.save(root / "new_joints" / "000001.npy", np.zeros((4, 22, 3), np.float32))
        np.save(root / "new_joint_vecs" / "000001.npy", np.zeros((4, 263), np.float32))
        (root / "texts" / "000001.txt").write_text("a man walks#a/DET man/NOUN#0.0#0.0\n")
        out = retrieval.load_motion_text(d, "test", **kw)
    assert len(out) == 1
    return out


RECIPES = {
    "jaxkit.retrieval.banzhaf_mc": lambda **kw: retrieval.banzhaf_mc(
        _value, jnp.asarray(TABLE), n_players=3, **{"key": _key(), "n_samples": 4, **kw}
    ),
    "jaxkit.retrieval.stii_permutation": lambda **kw: retrieval.stii_permutation(
        _value, jnp.asarray(TABLE), n_players=3, n_perms=2, **{"key": _key(), **kw}
    ),
    "jaxkit.retrieval.stii_stratified": lambda **kw: retrieval.stii_stratified(
        _value, jnp.asarray(TABLE), n_players=3, n_samples=4, **{"key": _key(), **kw}
    ),
    "jaxkit.retrieval.dpc_knn": lambda **kw: retrieval.dpc_knn(
        TOKENS, n_centers=2, **{"k": 2, **kw}
    ),
    "jaxkit.retrieval.info_nce": lambda **kw: retrieval.info_nce(SCORES, **kw),
    "jaxkit.retrieval.negative_filter": lambda **kw: retrieval.negative_filter(TOKENS, **kw),
    "jaxkit.retrieval.pyramid_consistency": lambda **kw: retrieval.pyramid_consistency(
        LOCAL, SCORES, **kw
    ),
    "jaxkit.retrieval.stii_alignment_loss": lambda **kw: retrieval.stii_alignment_loss(
        SIM, PHI, MASK_A, MASK_B, **kw
    ),
    "jaxkit.retrieval.dissimilar_subset": lambda **kw: retrieval.dissimilar_subset(
        SELFSIM, size=3, **kw
    ),
    "jaxkit.retrieval.protocol_metrics": lambda **kw: retrieval.protocol_metrics(
        SIMS, **{"key": _key(), "protocol": "guo", "batch_size": 4, **kw}
    ),
    "jaxkit.retrieval.retrieval_metrics": lambda **kw: retrieval.retrieval_metrics(
        SIMS, **({"text_selfsim": SELFSIM} if "threshold" in kw else {}), **kw
    ),
    "jaxkit.retrieval.load_motion_text": _load,
    "jaxkit.retrieval.synthetic_motion_text": lambda **kw: retrieval.synthetic_motion_text(
        4, **{"key": _key(), "length": 12, **kw}
    ),
    "jaxkit.retrieval.banzhaf_exact": functools.partial(retrieval.banzhaf_exact, TABLE),
    "jaxkit.retrieval.moebius_transform": functools.partial(retrieval.moebius_transform, TABLE),
    "jaxkit.retrieval.stii_exact": functools.partial(retrieval.stii_exact, TABLE),
    "jaxkit.retrieval.merge_tokens": functools.partial(
        retrieval.merge_tokens, TOKENS, ASSIGN, LOG_W, n_centers=2
    ),
    "jaxkit.retrieval.cross_modal_stii": functools.partial(
        retrieval.cross_modal_stii, SIM, W_A, W_B, MASK_A, MASK_B
    ),
    "jaxkit.retrieval.cross_modal_value": functools.partial(
        retrieval.cross_modal_value, (SIM, W_A, W_B), np.concatenate([MASK_A, MASK_B])
    ),
    "jaxkit.retrieval.wti_value": functools.partial(
        retrieval.wti_value, SIM, W_A, W_B, MASK_A, MASK_B
    ),
    "jaxkit.retrieval.token_scores": functools.partial(
        retrieval.token_scores,
        M_TOK,
        np.ones((2, 3), np.float32),
        np.ones((2, 3), bool),
        T_TOK,
        np.ones((2, 2), np.float32),
        np.ones((2, 2), bool),
    ),
    "jaxkit.retrieval.TokenCompressor": lambda **kw: retrieval.TokenCompressor(
        4, **{"key": _key(), "n_heads": 2, **kw}
    ),
    "jaxkit.retrieval.TokenCompressor.__call__": lambda **kw: retrieval.TokenCompressor(
        3, key=_key(), n_heads=1
    )(TOKENS, np.array([True, True, True, True, False, True]), **kw),
}

EXEMPT: dict[str, str] = {}

ANY_RANK: dict[str, str] = {
    "jaxkit.retrieval.banzhaf_mc:params": "the game's parameters (any pytree), passed through "
    "to the user's value_fn: their rank is value_fn's business",
    "jaxkit.retrieval.stii_permutation:params": "the game's parameters (any pytree), passed "
    "through to the user's value_fn: their rank is value_fn's business",
    "jaxkit.retrieval.stii_stratified:params": "the game's parameters (any pytree), passed "
    "through to the user's value_fn: their rank is value_fn's business",
    "jaxkit.retrieval.banzhaf_exact:values": "`[*batch, 2**n]`: one game per leading batch entry",
    "jaxkit.retrieval.moebius_transform:values": "`[*batch, 2**n]`: one game per leading "
    "batch entry",
    "jaxkit.retrieval.stii_exact:values": "`[*batch, 2**n]`: one game per leading batch entry",
    "jaxkit.retrieval.dpc_knn:x": "`[*batch, n, d]`: batched over leading axes",
    "jaxkit.retrieval.info_nce:scores": "`[*batch, n, n]`: one loss per leading batch entry",
}

_USERS_PARAMS = (
    "the game's parameters (any pytree), only read by the user's value_fn: an empty array "
    "is value_fn's business (its error, or its value)"
)
EMPTY_EXEMPT: dict[str, str] = {
    "jaxkit.retrieval.banzhaf_mc:params": _USERS_PARAMS,
    "jaxkit.retrieval.stii_permutation:params": _USERS_PARAMS,
    "jaxkit.retrieval.stii_stratified:params": _USERS_PARAMS,
}
