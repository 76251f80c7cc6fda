"""Enumerable toys for the diffusion tests: an exact-conditional denoiser and NumPy chains."""

import functools
import itertools

import jax
import jax.numpy as jnp
import numpy as np

from jaxkit import nn


def all_sequences(v: int, length: int) -> np.ndarray:
    return np.array(list(itertools.product(range(v), repeat=length)), np.int32)


def random_joint(v: int, length: int, seed: int) -> np.ndarray:
    """A strictly positive, far-from-product joint over V^L (table indexed like all_sequences)."""
    rng = np.random.default_rng(seed)
    logits = rng.normal(size=v**length) * 1.5
    p = np.exp(logits)
    return p / p.sum()


@functools.cache
def exact_denoiser(v: int, length: int, seed: int):
    """apply_fn returning log p(x_i = . | unmasked tokens) of a known joint (mask id = v)."""
    seqs = jnp.asarray(all_sequences(v, length))
    p = jnp.asarray(random_joint(v, length, seed), jnp.float32)

    def apply_fn(params, tokens, positions, attn_mask):
        del params, positions, attn_mask
        compat = jnp.all((tokens[:, None, :] == v) | (tokens[:, None, :] == seqs[None]), axis=-1)
        w = jnp.where(compat, p[None], 0.0)  # [B, S]
        onehot = jax.nn.one_hot(seqs, v, dtype=jnp.float32)  # [S, L, v]
        marg = jnp.einsum("bs,slv->blv", w, onehot) / jnp.sum(w, axis=-1)[:, None, None]
        logits = jnp.log(marg)
        return jnp.concatenate([logits, jnp.zeros_like(logits[..., :1])], axis=-1)

    return apply_fn


def np_exact_log_p(v: int, length: int, seed: int):
    """NumPy (float64) log p(x_i = . | unmasked tokens) of :func:`exact_denoiser`'s joint."""
    seqs = all_sequences(v, length)
    p = random_joint(v, length, seed)
    onehot = (seqs[..., None] == np.arange(v)).astype(np.float64)  # [S, L, v]

    def f(z):
        z = np.asarray(z)
        compat = np.all((z[:, None, :] == v) | (z[:, None, :] == seqs[None]), axis=-1)
        w = np.where(compat, p[None], 0.0)  # [B, S]
        marg = np.einsum("bs,slv->blv", w, onehot) / w.sum(-1)[:, None, None]
        with np.errstate(divide="ignore"):
            return np.concatenate([np.log(marg), np.full((*z.shape, 1), -np.inf)], axis=-1)

    return f


def tiny_transformer(v: int, seed: int = 0, sharpen: float = 3.0, n_layers: int = 1):
    """A random bidirectional denoiser over v letters + [MASK] (id v)."""
    cfg = nn.TransformerConfig(
        vocab_size=v + 1,
        d_model=16,
        n_layers=n_layers,
        n_heads=2,
        n_kv_heads=1,
        head_dim=8,
        mlp_dim=16,
        causal=False,
    )
    params = nn.init_params(cfg, key=jax.random.key(seed))
    params = dict(params, lm_head=params["lm_head"] * sharpen)
    return cfg, params


def exact_bound(log_p_fn, x: np.ndarray, mask_id: int) -> float:
    """The continuous-time NELBO of x by subset enumeration (any schedule with alpha(1)=0).

    NELBO = sum_k (1/k) mean_{|S|=k} sum_{i in S} -log p(x_i | x with S masked).
    ``log_p_fn(z [n, L]) -> [n, L, V]`` log-probabilities.
    """
    length = len(x)
    total = 0.0
    for k in range(1, length + 1):
        subsets = list(itertools.combinations(range(length), k))
        z = np.tile(x, (len(subsets), 1))
        for r, s in enumerate(subsets):
            z[r, list(s)] = mask_id
        lp = np.asarray(log_p_fn(z), np.float64)
        vals = [-sum(lp[r, i, x[i]] for i in s) for r, s in enumerate(subsets)]
        total += np.mean(vals) / k
    return total


def _states(v: int, length: int) -> np.ndarray:
    return all_sequences(v + 1, length)  # letters 0..v-1 and mask v


def exact_sampler_distribution(log_p_fn, v, length, num_steps, order, alpha, eps_alpha1=0.0):
    """Exact distribution over V^L of the T-step reverse chain from all-[MASK] (NumPy).

    ``alpha`` is the schedule as a Python function; ``log_p_fn(z) -> [n, L, V+1]``.
    """
    states = _states(v, length)
    index = {tuple(s): i for i, s in enumerate(states)}
    lp = np.asarray(log_p_fn(states), np.float64)[..., :v]
    probs = np.exp(lp)
    probs /= probs.sum(-1, keepdims=True)
    dist = np.zeros(len(states))
    dist[index[(v,) * length]] = 1.0
    n0 = length
    for k in range(num_steps):
        t, s = 1 - k / num_steps, 1 - (k + 1) / num_steps
        new = np.zeros_like(dist)
        for si, mass in enumerate(dist):
            if mass == 0:
                continue
            z = states[si]
            masked = [i for i in range(length) if z[i] == v]
            if not masked:
                new[si] += mass
                continue
            if order == "ancestral":
                p_un = 1.0 if k == num_steps - 1 else (alpha(s) - alpha(t)) / (1 - alpha(t))
                # each masked slot: stay (v) or token c
                opts = [
                    [(v, 1 - p_un)] + [(c, p_un * probs[si, i, c]) for c in range(v)]
                    for i in masked
                ]
                for combo in itertools.product(*opts):
                    z2 = z.copy()
                    pr = mass
                    for i, (c, q) in zip(masked, combo, strict=True):
                        z2[i] = c
                        pr *= q
                    new[index[tuple(z2)]] += pr
            else:
                frac = (1 - alpha(s)) / (1 - eps_alpha1)
                keep = 0 if k == num_steps - 1 else int(np.floor(n0 * frac + 1e-6))
                n_un = max(len(masked) - keep, 0)
                for combo in itertools.product(range(v), repeat=len(masked)):
                    pr = mass * np.prod(
                        [probs[si, i, c] for i, c in zip(masked, combo, strict=True)]
                    )
                    conf = np.full(length, -1.0)
                    for i, c in zip(masked, combo, strict=True):
                        conf[i] = probs[si, i, c]
                    order_ = np.argsort(-conf, kind="stable")
                    chosen = set(order_[:n_un].tolist())
                    z2 = z.copy()
                    for i, c in zip(masked, combo, strict=True):
                        if i in chosen:
                            z2[i] = c
                    new[index[tuple(z2)]] += pr
        dist = new
    final = all_sequences(v, length)
    return np.array([dist[index[tuple(x)]] for x in final])


# ------------------------------------------------------------------ exact-target toy (§2.4-2)

TOY_V, TOY_L, TOY_MASK = 3, 5, 3


def mlp_init(key, v=TOY_V, length=TOY_L, hidden=128, out_scale=0.01):
    d = length * (v + 1)
    k1, k2, k3 = jax.random.split(key, 3)
    return {
        "w1": jax.random.normal(k1, (d, hidden)) / np.sqrt(d),
        "b1": jnp.zeros((hidden,)),
        "w2": jax.random.normal(k2, (hidden, hidden)) / np.sqrt(hidden),
        "b2": jnp.zeros((hidden,)),
        "w3": jax.random.normal(k3, (hidden, d)) * out_scale,
        "b3": jnp.zeros((d,)),
    }


def mlp_apply(params, tokens, positions, attn_mask):
    """A fully expressive denoiser of the whole noisy sequence (one-hot -> MLP -> logits)."""
    del positions, attn_mask
    b, length = tokens.shape
    vv = params["w3"].shape[1] // length
    x = jax.nn.one_hot(tokens, vv, dtype=params["w1"].dtype).reshape(b, length * vv)
    h = jax.nn.gelu(x @ params["w1"] + params["b1"][None])
    h = jax.nn.gelu(h @ params["w2"] + params["b2"][None])
    return (h @ params["w3"] + params["b3"][None]).reshape(b, length, vv)


def np_mlp_log_p(params, mask_id: int):
    """NumPy (float64) SUBS log-probabilities of :func:`mlp_apply`: ``z [B, L] -> [B, L, V]``.

    An oracle independent of jax (tanh GELU as ``jax.nn.gelu``'s default; [MASK] at -inf).
    """
    w = {k: np.asarray(a, np.float64) for k, a in params.items()}

    def gelu(x):
        return 0.5 * x * (1.0 + np.tanh(np.sqrt(2.0 / np.pi) * (x + 0.044715 * x**3)))

    def f(z):
        z = np.asarray(z)
        b, length = z.shape
        vv = w["w3"].shape[1] // length
        x = (z[..., None] == np.arange(vv)).reshape(b, length * vv).astype(np.float64)
        h = gelu(gelu(x @ w["w1"] + w["b1"]) @ w["w2"] + w["b2"])
        logits = (h @ w["w3"] + w["b3"]).reshape(b, length, vv)
        logits[..., mask_id] = -np.inf
        m = logits.max(-1, keepdims=True)
        return logits - m - np.log(np.exp(logits - m).sum(-1, keepdims=True))

    return f


def toy_data():
    """p_data: a Markov chain over 3 letters; oracles g (affinity) and f (direction)."""
    seqs = all_sequences(TOY_V, TOY_L)
    init = np.array([0.5, 0.3, 0.2])
    trans = np.array([[0.6, 0.3, 0.1], [0.2, 0.6, 0.2], [0.3, 0.2, 0.5]])
    p = init[seqs[:, 0]] * np.prod(trans[seqs[:, :-1], seqs[:, 1:]], axis=1)
    g = 1 / (1 + np.exp(-(np.sum(seqs == 2, axis=1) - 1.5)))
    f = 1 / (
        1 + np.exp(-2.0 * (np.sum(seqs[:, :2] == 1, axis=1) - np.sum(seqs[:, :2] == 0, axis=1)))
    )
    return seqs, p / p.sum(), g.astype(np.float32), f.astype(np.float32)


def tv(p, q):
    return 0.5 * float(np.abs(np.asarray(p) - np.asarray(q)).sum())


def empirical(tokens, v=TOY_V):
    t = np.asarray(tokens)
    idx = t @ (v ** np.arange(t.shape[1] - 1, -1, -1))
    c = np.bincount(idx, minlength=v ** t.shape[1])
    return c / c.sum()


# One compiled program per shape (eager, each initialiser op compiled a program of its own).
_mlp_init = jax.jit(mlp_init, static_argnums=(1, 2, 3, 4))


@functools.cache
def random_mlp(v: int, length: int, seed: int):
    """A cheap random denoiser (no consistent joint) for v letters + [MASK] (id v); built once
    per (v, length, seed) and worker (the tests only read it)."""
    return mlp_apply, _mlp_init(jax.random.key(seed), v, length, 32, 0.5)
