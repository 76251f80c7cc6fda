"""Soft (differentiable) counterparts of ``jax.random`` samplers.

This module mirrors ``jax.random``, so its samplers keep ``jax.random``'s *positional*
``key`` first argument on purpose (everywhere else in jaxkit the key is keyword-only
``key=``); typed keys and legacy ``uint32[2]`` keys are both accepted.

Categorical-type samplers perturb logits with Gumbel noise and replace the hard
``argmax`` / ``top_k`` / ``argsort`` by :func:`jaxkit.soft.argmax`,
:func:`jaxkit.soft.argtop_k` and :func:`jaxkit.soft.argsort` (Gumbel-max,
Gumbel-top-k, Gumbel-sort); threshold-type samplers compare a uniform draw with the
probability through :func:`jaxkit.soft.less` (``bernoulli = less(u, p)``), or, with
``noise="logistic"``, use the binary Concrete relaxation.

Modes (static): ``"hard"`` calls the ``jax.random`` sampler itself; ``"_hard"`` runs the
hard decision on the *same noise* as the soft modes (so a straight-through pair shares
its sample); ``"smooth"``, ``"c0"``, ``"c1"``, ``"c2"`` are the relaxations of
:mod:`jaxkit.soft`. The ``*_st`` variants return the ``"_hard"`` sample with the
gradient of the requested soft mode.

Every sampler is jitted like jax.numpy (module level, static choices static,
hyperparameters traced): ``softness``, probabilities and ``log_prob_eps`` are traced
(a bad concrete value raises ``ValueError`` at the call, a bad traced one a run-time
error: NaN included); modes, methods, shapes, ``n``, ``n_iters`` and ``rng_mode`` are
static (a wrong Python type raises ``TypeError``).

Non-finite logits: ``-inf`` (an impossible category) is replaced by the finite floor
``-1e30`` (``+inf`` by ``+1e30``) before the Gumbel noise is added, so soft modes stay
finite and such categories get (numerically) zero weight; NaN logits raise.

``rng_mode`` (static) is passed to ``jax.random``'s ``mode=`` argument ("low"/"high"
bits of the Gumbel or uniform draw; ``None`` = JAX's default) in the hard *and* the soft
paths, so ``"_hard"`` keeps matching ``"hard"``. :func:`gumbel_sinkhorn` relaxes a random
permutation matrix (Mena et al. 2018); :func:`exponential_schedule`,
:func:`linear_schedule` and :func:`temperature_schedule` anneal ``softness`` during
training.

References:
  Gumbel, Statistical theory of extreme values, 1954; Maddison, Mnih & Teh, The
  Concrete distribution <https://arxiv.org/abs/1611.00712>, 2017; Jang, Gu & Poole,
  Categorical reparameterization with Gumbel-softmax <https://arxiv.org/abs/1611.01144>,
  2017; Kool, van Hoof & Welling, Stochastic beams and where to find them (Gumbel-top-k)
  <https://arxiv.org/abs/1903.06059>, 2019; Grover et al., NeuralSort
  <https://arxiv.org/abs/1903.08850>, 2019; Mena, Belanger, Linderman & Snoek,
  Learning latent permutations with Gumbel-Sinkhorn networks
  <https://arxiv.org/abs/1802.08665>, 2018; Paulus et al., SoftJAX & SoftTorch
  <https://arxiv.org/abs/2603.08824>, 2026.
"""

from jaxkit.soft._gumbel_sinkhorn import gumbel_sinkhorn
from jaxkit.soft._random_categorical import categorical, choice, multinomial, permutation
from jaxkit.soft._random_common import st_random
from jaxkit.soft._random_threshold import bernoulli, binomial, rademacher
from jaxkit.soft._schedules import exponential_schedule, linear_schedule, temperature_schedule

__all__ = [
    "bernoulli",
    "bernoulli_st",
    "binomial",
    "binomial_st",
    "categorical",
    "categorical_st",
    "choice",
    "choice_st",
    "exponential_schedule",
    "gumbel_sinkhorn",
    "gumbel_sinkhorn_st",
    "linear_schedule",
    "multinomial",
    "multinomial_st",
    "permutation",
    "permutation_st",
    "rademacher",
    "rademacher_st",
    "temperature_schedule",
]

categorical_st = st_random(categorical)
choice_st = st_random(choice)
permutation_st = st_random(permutation)
multinomial_st = st_random(multinomial)
bernoulli_st = st_random(bernoulli)
rademacher_st = st_random(rademacher)
binomial_st = st_random(binomial)
gumbel_sinkhorn_st = st_random(gumbel_sinkhorn)
