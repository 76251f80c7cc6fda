"""Keyword-sweep recipes for privacy (see tests/keywords.py)."""

import functools

import jax
import numpy as np

from jaxkit import privacy
from jaxkit.privacy import audit
from jaxkit.privacy import lowrank as L

_rng = np.random.default_rng(0)
W = _rng.normal(size=(6, 5)).astype(np.float32)
A = _rng.normal(size=(6, 2)).astype(np.float32)
B = _rng.normal(size=(5, 2)).astype(np.float32)
GA = _rng.normal(size=(3, 6, 2)).astype(np.float32)
GB = _rng.normal(size=(3, 5, 2)).astype(np.float32)
X = _rng.normal(size=(4, 3)).astype(np.float32)
C = L.TangentCoords(*(_rng.normal(size=s).astype(np.float32) for s in [(2, 2), (6, 2), (5, 2)]))
PARAMS = {"w": W}
DP = dict(clip_norm=1.0, noise_multiplier=1.0, denom=3.0)


def _optimizer(name, *args, per_example=True, **fixed):
    """A recipe for an optax transformation: build it, then one update on LoRA factors.

    ``name`` is the transformation's attribute of ``jaxkit.privacy``, looked up at call time
    (the array sweep patches it there).
    """

    def call(**kw):
        make = getattr(privacy, name)
        tx = make(*args, **{**fixed, **kw})  # a swept keyword replaces a fixed one (`key`)
        f = L.LoraFactors(A, B)
        g = L.LoraFactors(GA, GB) if per_example else L.LoraFactors(GA[0], GB[0])
        return tx.update(g, tx.init(f), f)[0]

    return call


def _keyed_optimizer(name, *args, **fixed):
    return lambda **kw: _optimizer(name, *args, **{"key": jax.random.key(0), **fixed})(**kw)


def _lora():
    return privacy.lora_init(PARAMS, targets="w", rank=2, key=jax.random.key(0)).lora


def _loss(w, x):
    return ((x @ w) ** 2).sum()


def _with_cache(name, *args):
    """A recipe for ``lowrank.<name>(f, *args, cache)`` at ``f = (A, B)`` and its Gram cache."""

    def call(**kw):
        f = L.LoraFactors(A, B)
        return getattr(L, name)(f, *args, L.gram_cache(f), **kw)

    return call


def _canary(**kw):
    base = L.LoraFactors(GA, GB)
    canary = L.LoraFactors(GA[0], GB[0])

    def release(g, k):
        return jax.tree.map(lambda x: x.sum(0) + jax.random.normal(k, x.shape[1:]), g)

    return audit.canary_audit(
        release, base=base, canary=canary, **{"key": jax.random.key(0), "trials": 20, **kw}
    )


RECIPES = {
    "jaxkit.privacy.calibrate_sigma": functools.partial(
        privacy.calibrate_sigma, epsilon=2.0, delta=1e-5, q=0.01, steps=10
    ),
    "jaxkit.privacy.epsilon": functools.partial(
        privacy.epsilon, q=0.01, noise_multiplier=1.0, steps=10, delta=1e-5
    ),
    "jaxkit.privacy.ffa_lora": _keyed_optimizer("ffa_lora", 0.1, **DP),
    "jaxkit.privacy.naive_dp_lora": _keyed_optimizer("naive_dp_lora", 0.1, **DP),
    "jaxkit.privacy.nonprivate_lora": _optimizer("nonprivate_lora", 0.1),
    "jaxkit.privacy.lora_init": lambda **kw: privacy.lora_init(
        PARAMS, targets="w", rank=2, **{"key": jax.random.key(0), **kw}
    ),
    "jaxkit.privacy.lora_merge": lambda **kw: privacy.lora_merge(PARAMS, _lora(), **kw),
    "jaxkit.privacy.lora_unmerge": lambda **kw: privacy.lora_unmerge(PARAMS, _lora(), **kw),
    "jaxkit.privacy.per_example_grads": lambda **kw: privacy.per_example_grads(
        _loss, W[:3], X, **kw
    ),
    "jaxkit.privacy.prism": _keyed_optimizer("prism", 0.1, **DP),
    "jaxkit.privacy.prism_privatize": _keyed_optimizer("prism_privatize", **DP),
    "jaxkit.privacy.dp_aggregate": _keyed_optimizer("dp_aggregate", **DP),
    "jaxkit.privacy.poisson_batch": lambda **kw: privacy.poisson_batch(
        **{"key": jax.random.key(0), "num_examples": 8, "q": 0.5, "max_batch_size": 8, **kw}
    ),
    "jaxkit.privacy.prism_adaptive": _optimizer("prism_adaptive", 0.1, per_example=False),
    "jaxkit.privacy.audit.clopper_pearson": functools.partial(audit.clopper_pearson, 3, 10),
    "jaxkit.privacy.audit.canary_audit": _canary,
    "jaxkit.privacy.lowrank.balanced_random_init": lambda **kw: L.balanced_random_init(
        m=6, n=5, rank=2, **{"key": jax.random.key(0), **kw}
    ),
    "jaxkit.privacy.lowrank.spectral_init": lambda **kw: L.spectral_init(
        W, rank=2, **{"key": jax.random.key(0), **kw}
    ),
    "jaxkit.privacy.lowrank.balance": lambda **kw: L.balance(L.LoraFactors(A, B), **kw),
    "jaxkit.privacy.lowrank.gram_cache": lambda **kw: L.gram_cache(L.LoraFactors(A, B), **kw),
    "jaxkit.privacy.lowrank.sample_tangent_coords": lambda **kw: L.sample_tangent_coords(
        L.gram_cache(L.LoraFactors(A, B)), std=0.1, **{"key": jax.random.key(0), **kw}
    ),
    "jaxkit.privacy.lowrank.sample_tangent_noise": lambda **kw: L.sample_tangent_noise(
        L.LoraFactors(A, B),
        L.gram_cache(L.LoraFactors(A, B)),
        std=0.1,
        **{"key": jax.random.key(0), **kw},
    ),
    "jaxkit.privacy.lowrank.naive_noise_energy": functools.partial(
        L.naive_noise_energy, L.LoraFactors(A, B), tau=0.1
    ),
    "jaxkit.privacy.lowrank.prism_noise_energy": functools.partial(
        L.prism_noise_energy, L.LoraFactors(A, B), std=0.1
    ),
    "jaxkit.privacy.lowrank.project_tangent_dense": functools.partial(
        L.project_tangent_dense, L.LoraFactors(A, B), W
    ),
    "jaxkit.privacy.lowrank.retract": lambda **kw: L.retract(
        L.LoraFactors(A, B), L.LoraFactors(GA[0], GB[0]), eta=0.1, **kw
    ),
    "jaxkit.privacy.lowrank.check_factors": functools.partial(L.check_factors, L.LoraFactors(A, B)),
    "jaxkit.privacy.lowrank.to_dense": functools.partial(L.to_dense, L.LoraFactors(A, B)),
    "jaxkit.privacy.lowrank.tangent_dense": functools.partial(
        L.tangent_dense, L.LoraFactors(A, B), L.LoraFactors(GA[0], GB[0])
    ),
    "jaxkit.privacy.lowrank.tangent_norm_sq": functools.partial(
        L.tangent_norm_sq, L.LoraFactors(A, B), L.LoraFactors(GA[0], GB[0])
    ),
    "jaxkit.privacy.lowrank.coords_norm_sq": functools.partial(L.coords_norm_sq, C),
    "jaxkit.privacy.lowrank.tangent_coords": _with_cache(
        "tangent_coords", L.LoraFactors(GA[0], GB[0])
    ),
    "jaxkit.privacy.lowrank.from_coords": _with_cache("from_coords", C),
    "jaxkit.privacy.lowrank.tangent_lift": _with_cache("tangent_lift", L.LoraFactors(GA[0], GB[0])),
    "jaxkit.privacy.lowrank.horizontal_lift": _with_cache(
        "horizontal_lift", L.LoraFactors(GA[0], GB[0])
    ),
}

ANY_RANK: dict[str, str] = {
    "jaxkit.privacy.per_example_grads:params": "a pytree passed through to `loss_fn`: "
    "its leaves' shapes are the user's model's",
    "jaxkit.privacy.per_example_grads:batch": "a pytree whose leaves carry a leading batch "
    "axis (rank 0 is a TypeError); the rest of each leaf's shape is what `loss_fn` takes",
}

EXEMPT: dict[str, str] = {
    "jaxkit.privacy.PrivatizeState:key": "a record the library returns (an aggregator's state)",
    "jaxkit.privacy.lowrank.check_factors:name": "free text: the label its error messages use",
}

EMPTY_EXEMPT: dict[str, str] = {
    "jaxkit.privacy.per_example_grads:params": "a parameter pytree only the user's `loss_fn` "
    "reads (differentiated, never inspected): an empty leaf's error is the user's model's",
    "jaxkit.privacy.per_example_grads:batch": "leaves only the user's `loss_fn` reads past the "
    "leading batch axis (an empty batch gives empty per-example gradients, no NaN); an empty "
    "feature axis is the user's model's error",
}
