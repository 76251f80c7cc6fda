"""Conformance cases for jaxkit.data (see tests/conformance.py)."""

import jax
import jax.numpy as jnp
import optax

from jaxkit import data, nn
from tests.conformance import Bad, Case, built_once

N, DIM, K, B = 8, 4, 3, 2


def _emb(key, dtype):
    k1, k2 = jax.random.split(key)
    q = jax.random.normal(k1, (N, DIM), jnp.float32)
    d = q + 0.5 * jax.random.normal(k2, (N, DIM), jnp.float32)
    q = q / jnp.linalg.norm(q, axis=1, keepdims=True)
    d = d / jnp.linalg.norm(d, axis=1, keepdims=True)
    return q.astype(dtype), d.astype(dtype)


def _graph_args(key, dtype):
    q, d = _emb(key, dtype)
    nbr = jnp.argsort(jax.random.uniform(key, (N, N)), axis=1)[:, :K].astype(jnp.int32)
    w = jax.random.uniform(jax.random.fold_in(key, 1), (N, K), dtype)
    return q, d, nbr, w


def _knn(q, d, *, tau, margin):
    return data.knn_graph(q, d, k=K, tau=tau, margin=margin, block=4)


def _objective(batch, nbr, w):
    return data.hobit_objective(batch, data.SparseHardness(nbr, w))


def _objective_args(key, dtype):
    _, _, nbr, w = _graph_args(key, dtype)
    return jnp.array([1, 4, 6], jnp.int32), nbr, w


def _greedy(w):
    return data.greedy_select(w, 3)


def _greedy_args(key, dtype):
    return (jax.random.uniform(key, (N, 6), dtype),)


def _batches(q, d, nbr, w, *, margin, hard_fraction, batch_size=B):
    g = data.SparseHardness(nbr, w)
    return data.hobit_batches(
        g, q, d, key=jax.random.key(0), batch_size=batch_size, margin=margin,
        hard_fraction=hard_fraction,
    )  # fmt: skip


def _bad_b(key):
    return _graph_args(key, jnp.float32), {"batch_size": 3}


def _bad_margin(key):
    return _graph_args(key, jnp.float32), {"margin": -0.1}


def _bad_tau(key):
    return _emb(key, jnp.float32), {"tau": 0.0}


def _bad_knn_margin(key):
    return _emb(key, jnp.float32), {"margin": jnp.nan}


def _bad_w(key):
    return (-jax.random.uniform(key, (N, 6)),), {}


def _kmeans(q, *, batch_size=B):
    return data.kmeans_batches(q, key=jax.random.key(0), batch_size=batch_size, iters=3)


def _nn(q, d, *, tau):
    return data.nn_batches(q, d, key=jax.random.key(0), batch_size=B, k=K, tau=tau)


def _bad_kmeans(key):
    return (_emb(key, jnp.float32)[0],), {"batch_size": 3}


def _infonce(q, d, *, tau):
    return data.infonce(q, d, tau=tau)


def _bad_infonce_tau(key):
    return _emb(key, jnp.float32), {"tau": jnp.nan}


def _bad_infonce_empty(key):
    return (jnp.zeros((0, DIM)), jnp.zeros((0, DIM))), {"tau": 0.05}


def _bad_objective_batch(key):
    _, nbr, w = _objective_args(key, jnp.float32)
    return (jnp.array([1, 4, N], jnp.int32), nbr, w), {}


def _raw_args(key, dtype):
    return (jax.random.uniform(key, (N,), jnp.float32, 0.1, 1.0).astype(dtype),)


def _bad_raw(key):
    return (-_raw_args(key, jnp.float32)[0],), {}


def _gsnr_args(key, dtype):
    return (jax.random.normal(key, (N, 5), jnp.float32).astype(dtype) + 0.5,)


def _bad_gsnr(key):
    return (jnp.ones((1, 3)),), {}


def _mts_loss(params, batch):
    x, y = batch
    logits = jnp.tanh(x @ params["w1"]) @ params["w2"]
    return -jnp.take_along_axis(jax.nn.log_softmax(logits), y[:, None], axis=1)[:, 0]


_MTS_OPT = optax.sgd(1e-2, momentum=0.9)  # adam trips strict dtype promotion


def _mts_args(key, dtype):
    k = jax.random.split(key, 6)
    params = {
        "w1": jax.random.normal(k[0], (DIM, 5), jnp.float32).astype(dtype),
        "w2": jax.random.normal(k[1], (5, 3), jnp.float32).astype(dtype),
    }
    net = nn.MLP(2, 1, hidden=(4,), key=k[2], dtype=dtype)
    feats = jax.random.normal(k[3], (N, 2), jnp.float32).astype(dtype)
    y = jax.random.randint(k[4], (N,), 0, 3)
    batch = (_emb(k[5], dtype)[0], y)
    meta = (_emb(k[4], dtype)[1], y[::-1])
    return params, net, feats, batch, meta


def _hyper(params, net, feats, batch, meta, *, lr, mode="jvp"):
    return data.mts_hypergrad(_mts_loss, params, net, feats, batch, meta, lr=lr, mode=mode)


def _meta_args(key, dtype):
    params, net, feats, batch, meta = _mts_args(key, dtype)
    return params, net, _MTS_OPT.init(net), feats, batch, meta


def _meta_step(params, net, opt_state, feats, batch, meta, *, lr, mode="jvp"):
    return data.mts_meta_step(
        _mts_loss, _MTS_OPT, params, net, opt_state, feats, batch, meta, lr=lr, mode=mode
    )


@built_once
def _meta_base():  # one set of arguments shared by the bad-input cases (cheap to rerun)
    return _meta_args(jax.random.key(0), jnp.float32)


def _bad_lr(key):
    return _meta_base(), {"lr": -0.1}


def _bad_mode(key):
    return _meta_base(), {"lr": 0.1, "mode": "exact"}


def _bad_feats(key):
    params, net, opt_state, feats, batch, meta = _meta_base()
    return (params, net, opt_state, feats[0], batch, meta), {"lr": 0.1}


def _logits_args(key, dtype):
    return jax.random.normal(key, (N, 3), jnp.float32).astype(dtype), jnp.arange(N) % 3


def _feat_args(key, dtype):
    q, d = _emb(key, dtype)
    return q, jnp.arange(N) % 2, d, jnp.arange(N)[::-1] % 2


def _center(emb, y, ref, ry):
    return data.center_cosine(emb, y, ref, ry, num_classes=2)


def _knn_agree(emb, y, ref, ry):
    return data.knn_label_agreement(emb, y, ref, ry, k=3)


def _nearest(emb, y, ref, ry):
    return data.nearest_cosines(emb, ref, k=3)


def _bad_el2n(key):
    return (jnp.ones((N, 3)), jnp.arange(N)), {}


_SLOW = ("vmap", "traced_once", "dtypes", "eval_shape", "sharding")
_BASELINE_SLOW = (*_SLOW, "jit")

CASES = [
    Case(
        "data.knn_graph",
        _knn,
        _emb,
        hparams={"tau": (0.05, 0.1), "margin": (0.1, 0.2)},
        grad_modes=(),
        shard_argnums=(),  # single-device for now: sharded kNN (all-gather merge) not yet
        bad=(
            Bad("tau = 0", _bad_tau, ValueError, "tau"),
            Bad("NaN margin", _bad_knn_margin, ValueError, "margin"),
        ),
        slow_checks=("vmap",),
    ),
    Case(
        "data.hobit_objective",
        _objective,
        _objective_args,
        grad_argnums=(2,),
        shard_argnums=(),
        rtol=1e-5,
        bad=(Bad("batch index past n", _bad_objective_batch, ValueError, "batch"),),
    ),
    Case(
        "data.greedy_select",
        _greedy,
        _greedy_args,
        grad_modes=(),
        shard_argnums=(),
        bad=(Bad("negative weights", _bad_w, Exception, "w"),),
    ),
    Case(
        "data.hobit_batches",
        _batches,
        _graph_args,
        hparams={"margin": (0.1, 0.2), "hard_fraction": (1.0, 0.5)},
        grad_modes=(),
        shard_argnums=(),
        bad=(
            Bad("batch size not dividing n", _bad_b, ValueError, "batch_size"),
            Bad("margin < 0", _bad_margin, ValueError, "margin"),
        ),
        slow_checks=_SLOW,
    ),
    Case(
        "data.infonce",
        _infonce,
        _emb,
        hparams={"tau": (0.05, 0.2)},
        grad_argnums=(0, 1),
        shard_argnums=(),  # multi-device through axis_name (tests/data/test_infonce.py)
        rtol=1e-4,
        bad=(
            Bad("NaN tau", _bad_infonce_tau, ValueError, "tau"),
            Bad("empty batch", _bad_infonce_empty, TypeError, "q"),
        ),
        slow_checks=("dtypes", "eval_shape", "traced_once"),
    ),
    Case(
        "data.normalize_weights",
        data.normalize_weights,
        _raw_args,
        rtol=1e-5,
        bad=(Bad("non-positive raw weights", _bad_raw, ValueError, "raw"),),
        slow_checks=("dtypes", "eval_shape", "traced_once"),
    ),
    Case(
        "data.gsnr",
        data.gsnr,
        _gsnr_args,
        grad_modes=("rev",),
        rtol=1e-4,
        bad=(Bad("one draw", _bad_gsnr, ValueError, "K >= 2"),),
        slow_checks=("dtypes", "eval_shape", "traced_once"),
    ),
    Case(
        "data.kmeans_batches",
        _kmeans,
        lambda key, dtype: (_emb(key, dtype)[0],),
        grad_modes=(),
        shard_argnums=(),
        bad=(Bad("batch size not dividing n", _bad_kmeans, ValueError, "batch_size"),),
        slow_checks=_BASELINE_SLOW,
    ),
    Case(
        "data.nn_batches",
        _nn,
        _emb,
        hparams={"tau": (0.05, 0.1)},
        grad_modes=(),
        shard_argnums=(),
        slow_checks=_BASELINE_SLOW,
    ),
    Case(
        "data.mts_meta_step",
        _meta_step,
        _meta_args,
        hparams={"lr": (0.1, 0.3)},
        grad_modes=(),
        vmap=False,
        shard_argnums=(),
        rtol=1e-4,
        bad=(
            Bad("lr < 0", _bad_lr, ValueError, "lr"),
            Bad("unknown mode", _bad_mode, ValueError, "mode"),
            Bad("1-d features", _bad_feats, TypeError, "features"),
        ),
        slow_checks=("dtypes", "eval_shape", "traced_once"),
    ),
    *(
        Case(
            f"data.mts_hypergrad/{m}",
            _hyper,
            _mts_args,
            hparams={"lr": (0.1, 0.3)},
            static={"mode": m},
            grad_modes=(),
            vmap=False,
            shard_argnums=(),
            rtol=1e-4,
            slow_checks=("jit", "eager_cache", "dtypes", "eval_shape", "traced_once"),
        )
        for m in ("jvp", "unrolled", "finite_diff")
    ),
    Case(
        "data.el2n",
        data.el2n,
        _logits_args,
        grad_modes=("rev",),
        rtol=1e-5,
        bad=(Bad("labels out of range", _bad_el2n, ValueError, "labels"),),
        slow_checks=("dtypes", "eval_shape", "traced_once", "vmap", "grads"),
    ),
    Case(
        "data.center_cosine",
        _center,
        _feat_args,
        grad_modes=("rev",),
        shard_argnums=(),
        rtol=1e-5,
        slow_checks=("jit", "dtypes", "eval_shape", "traced_once", "vmap", "grads"),
    ),
    Case(
        "data.nearest_cosines",
        _nearest,
        _feat_args,
        grad_modes=(),
        shard_argnums=(),
        slow_checks=("jit", "dtypes", "eval_shape", "traced_once", "vmap"),
    ),
    Case(
        "data.knn_label_agreement",
        _knn_agree,
        _feat_args,
        grad_modes=(),
        shard_argnums=(),
        slow_checks=("jit", "dtypes", "eval_shape", "traced_once", "vmap"),
    ),
]


# ---------------------------------------------------------------- MTS (wave 6)
def _forget_args(key, dtype):
    k1, k2 = jax.random.split(key)
    return jax.random.bernoulli(k1, 0.5, (N,)), jax.random.permutation(k2, 2 * N)[:N]


def _forget(correct, idx):
    prev = jnp.arange(2 * N) % 2 == 0
    st = data.ForgettingState(prev, jnp.zeros(2 * N, jnp.int32), prev)
    return data.forgetting_update(st, correct, idx)


def _bad_forget_idx(key):
    c, idx = _forget_args(key, jnp.float32)
    return (c, idx.at[0].set(2 * N)), {}


CASES += [
    Case(
        "data.forgetting_update",
        _forget,
        _forget_args,
        grad_modes=(),
        shard_argnums=(),  # a scatter of Explicit-sharded rows into the [N] state: not supported
        bad=(Bad("idx out of range", _bad_forget_idx, ValueError, "idx"),),
        slow_checks=("dtypes", "eval_shape", "traced_once"),
    ),
]


def _l2rw_args(key, dtype):
    params, _, _, batch, meta = _mts_args(key, dtype)
    return params, _MTS_OPT.init(params), batch, meta


def _l2rw(params, opt_state, batch, meta):
    return data.l2rw_step(_mts_loss, _MTS_OPT, params, opt_state, batch, meta)


def _mwn_args(key, dtype):
    params, _, _, batch, meta = _mts_args(key, dtype)
    net = nn.MLP(1, 1, hidden=(4,), key=jax.random.fold_in(key, 7), dtype=dtype)
    return params, net, _MTS_OPT.init(net), batch, meta


def _mwn(params, net, opt_state, batch, meta, *, lr):
    return data.mwn_meta_step(_mts_loss, _MTS_OPT, params, net, opt_state, batch, meta, lr=lr)


def _bad_mwn_lr(key):
    return _mwn_args(key, jnp.float32), {"lr": jnp.nan}


CASES += [
    Case(
        "data.l2rw_step",
        _l2rw,
        _l2rw_args,
        grad_modes=(),
        vmap=False,
        shard_argnums=(),
        rtol=1e-4,
        slow_checks=("dtypes", "eval_shape", "traced_once"),
    ),
    Case(
        "data.mwn_meta_step",
        _mwn,
        _mwn_args,
        hparams={"lr": (0.1, 0.3)},
        grad_modes=(),
        vmap=False,
        shard_argnums=(),
        rtol=1e-4,
        bad=(Bad("NaN lr", _bad_mwn_lr, ValueError, "lr"),),
        slow_checks=("dtypes", "eval_shape", "traced_once"),
    ),
]
