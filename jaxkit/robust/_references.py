"""Reference distributions as weighted samples ``(xi, w)``: empirical, parametric, Bayesian.

The paper (arXiv 2601.21324) allows empirical, frequentist (fitted parametric) and
Bayesian (posterior predictive) references [P]; every one is represented here as weighted
samples, so the calibrators and the objective take them alike. For a Bayesian reference
calibrate the bulk on the predictive draws, not on the training data (spec pitfall).
"""

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
from jaxtyping import Array, ArrayLike, Float

from jaxkit import _validate
from jaxkit._typing import KeyArray


class Reference(NamedTuple):
    """Weighted samples of a reference law: ``xi`` (n, ...) and weights ``w`` (n,), sum 1."""

    xi: Array
    w: Array


def empirical(xi: Float[ArrayLike, "n ..."]) -> Reference:
    """The empirical law of the samples (weights ``1/n``): ``xi[i]`` is sample ``i``, any shape."""
    _validate.floating(xi, name="xi")  # before jnp.asarray: a str names the argument
    xi = jnp.asarray(xi)
    _validate.min_ndim(xi, 1, name="xi")
    _validate.nonempty(xi, name="xi")
    n = xi.shape[0]
    xi = _validate.all_finite(xi, name="xi")
    return Reference(xi=xi, w=jnp.full((n,), 1.0 / n, xi.dtype))


def parametric_draws(dist: Any, *, key: KeyArray, n: int) -> Reference:
    """``n`` draws (equal weights) from a fitted parametric law.

    Args:
      dist: Any object with ``sample(key, sample_shape)`` (e.g. a numpyro distribution with
        MLE parameters).
      key: PRNG key.
      n: Number of draws (static).

    Returns:
      A :class:`Reference`.
    """
    _validate.is_key(key)
    n = _validate.python_int(n, name="n", minimum=1)
    if not callable(getattr(dist, "sample", None)):
        raise TypeError(f"`dist` must have a `sample(key, shape)` method, got {type(dist)}.")
    xi = jnp.asarray(dist.sample(key, (n,)))
    return empirical(xi)


def _check_site(model: Any, site: Any, key: KeyArray, args: tuple, kwargs: dict) -> None:
    """TypeError unless ``site`` is a str; ValueError unless the model has a site of that name.

    The sites are read from one traced run of ``model(*args, **kwargs)``.
    """
    from numpyro import handlers

    if not isinstance(site, str):
        raise TypeError(f"`site` must be a str (a sample site name), got {type(site).__name__}.")
    trace = handlers.trace(handlers.seed(model, key)).get_trace(*args, **kwargs)
    sites = [k for k, v in trace.items() if v["type"] in ("sample", "deterministic")]
    if site not in sites:
        raise ValueError(
            f"`site`: the model has no site named {site!r} (its sites: "
            f"{', '.join(map(repr, sites))})."
        )


def posterior_predictive(
    model: Any,
    *args: Any,
    key: KeyArray,
    n: int,
    site: str = "obs",
    num_warmup: int = 500,
    num_chains: int = 1,
    **kwargs: Any,
) -> Reference:
    """``n`` posterior-predictive draws of a numpyro model (NUTS), host-side (needs ``prob``).

    Runs NUTS on ``model(*args, **kwargs)`` (``n`` samples after ``num_warmup``), then draws
    one replicate of ``site`` per posterior sample with ``model(*args, obs=None)``-style
    prediction (numpyro ``Predictive`` with the conditioning site removed); the model must
    accept its observations as the keyword ``obs`` and a ``None`` there at prediction time.

    Args:
      model: A numpyro model ``model(*args, obs=..., **kwargs)``.
      *args: Positional model arguments.
      key: PRNG key (split for inference and prediction).
      n: Number of posterior samples = predictive draws.
      site: Name of the observed site whose predictive draws are returned.
      num_warmup: NUTS warm-up steps.
      num_chains: Chains (run sequentially).
      **kwargs: Keyword model arguments, including ``obs`` (the data).

    Returns:
      A :class:`Reference` of ``n`` predictive draws (equal weights), flattened to one
      draw per posterior sample.

    Raises:
      TypeError: If ``site`` is not a str or ``key`` not a PRNG key.
      ValueError: If the model has no sample or deterministic site ``site`` (the message
        lists its sites); checked by one traced run of the model before inference.
    """
    from numpyro.infer import MCMC, NUTS, Predictive

    _validate.is_key(key)
    n = _validate.python_int(n, name="n", minimum=1)
    num_warmup = _validate.python_int(num_warmup, name="num_warmup", minimum=0)
    num_chains = _validate.python_int(num_chains, name="num_chains", minimum=1)
    k_inf, k_pred = jax.random.split(key)
    # numpyro's own arithmetic mixes int32 and float32 (fails under strict promotion)
    with jax.numpy_dtype_promotion("standard"):
        _check_site(model, site, k_inf, args, kwargs)
    mcmc = MCMC(
        NUTS(model),
        num_warmup=num_warmup,
        num_samples=n // num_chains,
        num_chains=num_chains,
        chain_method="sequential",
        progress_bar=False,
    )
    # numpyro's own arithmetic mixes int32 and float32 (fails under strict promotion)
    with jax.numpy_dtype_promotion("standard"):
        mcmc.run(k_inf, *args, **kwargs)
        post = mcmc.get_samples()
        pred_kwargs = {**kwargs, "obs": None}
        draws = Predictive(model, posterior_samples=post, return_sites=[site])(
            k_pred, *args, **pred_kwargs
        )[site]
    # One replicate per posterior sample: the first observation slot of each draw.
    xi = draws.reshape(draws.shape[0], -1)[:, 0] if draws.ndim > 1 else draws
    return empirical(jnp.asarray(xi))
