"""Conformance cases for jaxkit.editing (see tests/conformance.py)."""

import jax
import jax.numpy as jnp

from jaxkit import editing
from tests.conformance import Bad, Case

K, D, O = 3, 4, 2
_ALL_BUT = ("eval_shape", "vmap", "dtypes", "traced_once", "grads", "jit")
# the test budget (25 s of `make test` per area) keeps the cheap checks by default
_HEAVY = ("grads", "vmap", "dtypes")


def _taps(params, batch):
    return {"a": batch}


def _stats(x, ids):
    # the covariances only: the int32 counts have no derivative (check_grads compares floats)
    return editing.collect_stats(_taps, None, x, ids, num_memories=K, block=4).cov


def _stats_args(key, dtype):
    kx, ki = jax.random.split(key)
    x = jax.random.normal(kx, (8, 6, D), jnp.float32).astype(dtype)
    return x, jax.random.randint(ki, (8, 6), -1, K)


def _stats_bad_id(key):
    x, ids = _stats_args(key, jnp.float32)
    return (x, ids.at[0, 0].set(K)), {}


def _stats_bad_dtype(key):
    x, ids = _stats_args(key, jnp.float32)
    return (x, ids.astype(jnp.float32)), {}


def _cov(key, dtype):
    rows = jax.random.normal(key, (K, 10, D + 1), jnp.float32)
    rows = rows.at[..., -1].set(1.0)
    return (jnp.einsum("krd,kre->kde", rows, rows) / 10).astype(dtype)


_COUNT = jnp.array([10, 10, 10], jnp.int32)


def _extract(w, b, cov, *, rcond):
    st = editing.CovStats({"a": cov}, {"a": _COUNT})
    return editing.extract({"a": editing.Linear(w, b)}, st, rcond=rcond)


def _extract_args(key, dtype):
    kw, kb, kc = jax.random.split(key, 3)
    w = jax.random.normal(kw, (D, O), jnp.float32).astype(dtype)
    b = jax.random.normal(kb, (O,), jnp.float32).astype(dtype)
    return w, b, _cov(kc, dtype)


def _extract_bad_nan(key):
    w, b, cov = _extract_args(key, jnp.float32)
    return (w, b, cov.at[0, 0, 0].set(jnp.nan)), {}


def _extract_bad_rcond(key):
    return _extract_args(key, jnp.float32), {"rcond": -1.0}


_RATIO = jnp.array([0.2, 0.3, 0.5])


def _engrams(pw):
    return editing.Engrams({"a": editing.Linear(pw)}, {"a": _RATIO.astype(pw.dtype)})


def _erase(w, pw, memories, *, alpha, scale="count_ratio"):
    return editing.erase({"a": editing.Linear(w)}, _engrams(pw), memories, alpha=alpha, scale=scale)


def _keep(w, pw, memories):
    return editing.keep_only({"a": editing.Linear(w)}, _engrams(pw), memories)


def _compose(w, pw, coef, *, base):
    return editing.compose({"a": editing.Linear(w)}, _engrams(pw), coef, base=base)


def _edit_args(key, dtype):
    kw, kp = jax.random.split(key)
    w = jax.random.normal(kw, (D, O), jnp.float32).astype(dtype)
    pw = jax.random.normal(kp, (K, D, O), jnp.float32).astype(dtype)
    return w, pw, jnp.array([0, 2], jnp.int32)


def _compose_args(key, dtype):
    w, pw, _ = _edit_args(key, dtype)
    return w, pw, jnp.array([1.0, -0.5, 0.25], dtype)


def _edit_bad_id(key):
    w, pw, _ = _edit_args(key, jnp.float32)
    return (w, pw, jnp.array([0, K], jnp.int32)), {}


def _edit_bad_float_id(key):
    w, pw, _ = _edit_args(key, jnp.float32)
    return (w, pw, jnp.array([0.0, 1.0])), {}


def _projection(w, ct, c, *, rcond):
    return editing.engram_projection(w, ct, c, rcond=rcond)


def _projection_args(key, dtype):
    kw, kc = jax.random.split(key)
    cov = _cov(kc, dtype)[..., :D, :D]
    w = jax.random.normal(kw, (D, O), jnp.float32).astype(dtype)
    return w, cov[0], jnp.mean(cov, axis=0)


def _projection_bad_shape(key):
    w, ct, c = _projection_args(key, jnp.float32)
    return (w, ct[:-1], c), {"rcond": 1e-6}


def _apply(layers, x):
    h = x @ layers["a"].w
    return h, {"h": h}


def _criteria(w, pw, x, labels, ids):
    return editing.criteria(_apply, {"a": editing.Linear(w)}, _engrams(pw), x, labels, ids)


def _criteria_args(key, dtype):
    w, pw, _ = _edit_args(key, dtype)
    x = jax.random.normal(jax.random.fold_in(key, 1), (6, D), jnp.float32).astype(dtype)
    labels = jnp.array([0, 1, 0, 1, 1, 0], jnp.int32)
    ids = jnp.array([0, 1, 2, 0, 1, 2], jnp.int32)
    return w, pw, x, labels, ids


def _criteria_bad_missing(key):
    w, pw, x, labels, ids = _criteria_args(key, jnp.float32)
    return (w, pw, x, labels, jnp.zeros_like(ids)), {}


def _rows_args(key, dtype):
    kw, kx = jax.random.split(key)
    w = jax.random.normal(kw, (D, O), jnp.float32).astype(dtype)
    xf = jax.random.normal(kx, (5, D), jnp.float32).astype(dtype)
    xk = jax.random.normal(jax.random.fold_in(kx, 1), (9, D), jnp.float32).astype(dtype)
    return w, xf, xk


def _rows_bad_shape(key):
    w, xf, xk = _rows_args(key, jnp.float32)
    return (w, xf[:, :-1], xk), {}


def _patches(x):
    return editing.conv_patches(x, 3, stride=1)


def _patches_args(key, dtype):
    return (jax.random.normal(key, (8, 2, 5, 5), jnp.float32).astype(dtype),)


CASES = [
    Case(
        "editing.collect_stats",
        _stats,
        _stats_args,
        dtypes=(jnp.float32,),  # statistics are f32 (f64 for f64 rows) by design
        # the scanned batch-count axis cannot be sharded (lax.scan); data parallelism is
        # collect_stats(axis_name=...) inside shard_map (tests/editing/test_stats.py)
        shard_argnums=(),
        rtol=1e-4,
        grad_atol=1e-4,
        grad_rtol=1e-4,
        bad=(
            Bad("memory id out of range", _stats_bad_id, ValueError, "`ids`"),
            Bad("float ids", _stats_bad_dtype, TypeError, "`ids`"),
        ),
        slow_checks=_HEAVY,
    ),
    Case(
        "editing.extract",
        _extract,
        _extract_args,
        hparams={"rcond": (1e-6, 1e-5)},
        grad_argnums=(0, 1, 2),
        grad_modes=("rev",),
        shard_argnums=(),
        rtol=1e-4,
        grad_atol=1e-4,
        grad_rtol=1e-4,
        bad=(
            Bad("NaN statistics", _extract_bad_nan, ValueError, "finite"),
            Bad("negative rcond", _extract_bad_rcond, ValueError, "`rcond`"),
        ),
        slow_checks=(*_HEAVY, "eval_shape", "traced_once"),
    ),
    Case(
        "editing.erase",
        _erase,
        _edit_args,
        hparams={"alpha": (1.0, 0.5)},
        grad_argnums=(0, 1),
        shard_argnums=(),
        rtol=1e-5,
        bad=(
            Bad("memory id out of range", _edit_bad_id, ValueError, "`memories`"),
            Bad("float memory ids", _edit_bad_float_id, TypeError, "`memories`"),
        ),
        slow_checks=("vmap",),  # grads stay: the area's derivative check in `make test`
    ),
    Case(
        "editing.erase/weight_norm",
        _erase,
        _edit_args,
        hparams={"alpha": (1.0, 0.5)},
        static={"scale": "weight_norm"},
        grad_argnums=(0, 1),
        shard_argnums=(),
        rtol=1e-5,
        bad=(Bad("memory id out of range", _edit_bad_id, ValueError, "`memories`"),),
        slow_checks=_ALL_BUT,
    ),
    Case(
        "editing.keep_only",
        _keep,
        _edit_args,
        grad_argnums=(0, 1),
        shard_argnums=(),
        bad=(Bad("memory id out of range", _edit_bad_id, ValueError, "`memories`"),),
        slow_checks=_ALL_BUT,
    ),
    Case(
        "editing.compose",
        _compose,
        _compose_args,
        hparams={"base": (1.0, 0.0)},
        grad_argnums=(0, 1, 2),
        shard_argnums=(),
        slow_checks=_ALL_BUT,
        bad=(
            Bad(
                "NaN base (traced)",
                lambda key: (_compose_args(key, jnp.float32), {"base": jnp.nan}),
                ValueError,
                "`base`",
            ),
        ),
    ),
    Case(
        "editing.engram_projection",
        _projection,
        _projection_args,
        hparams={"rcond": (1e-6, 1e-5)},
        grad_argnums=(0, 1, 2),
        grad_modes=("rev",),
        shard_argnums=(),
        rtol=1e-4,
        grad_atol=1e-4,
        grad_rtol=1e-4,
        bad=(Bad("mismatched covariance", _projection_bad_shape, TypeError, "c_target"),),
        slow_checks=_ALL_BUT,
    ),
    Case(
        "editing.criteria",
        _criteria,
        _criteria_args,
        grad_modes=(),
        dtypes=(jnp.float32,),
        shard_argnums=(),
        bad=(Bad("memory without examples", _criteria_bad_missing, ValueError, "`ids`"),),
        slow_checks=_ALL_BUT,
    ),
    Case(
        "editing.natural_gradient_erase",
        editing.natural_gradient_erase,
        _rows_args,
        grad_modes=(),
        shard_argnums=(),
        rtol=1e-4,
        bad=(Bad("mismatched widths", _rows_bad_shape, TypeError, "x_target"),),
        slow_checks=_ALL_BUT,
    ),
    Case(
        "editing.memit_erase",
        editing.memit_erase,
        _rows_args,
        grad_modes=(),
        shard_argnums=(),
        rtol=1e-4,
        bad=(Bad("mismatched widths", _rows_bad_shape, TypeError, "x_forget"),),
        slow_checks=_ALL_BUT,
    ),
    Case(
        "editing.conv_patches",
        _patches,
        _patches_args,
        shard_argnums=(0,),
        slow_checks=(*_HEAVY, "sharding"),
    ),
]
