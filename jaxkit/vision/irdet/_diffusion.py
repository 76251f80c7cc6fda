"""Image-driven heat diffusion: diffusivity, a stable Fokker-Planck solver, particles.

The model (spec §4.2-4.3) is the Ito SDE ``dX = v(X) dt + sqrt(2 D(X)) dW`` with drift
``v = drift * grad I`` and diffusivity ``D = d0 * exp(-beta * (alpha |grad I| + (1 -
alpha) E))``, whose density obeys ``du/dt = lap(D u) - div(u v)``.

Flaw of the authors' code avoided here (explicit-scheme instability): the repo steps
its explicit update with ``D * dt = 0.64 > 1/4``, beyond the stability limit of the
five-point scheme. :func:`fokker_planck` takes ``substeps`` sub-steps of size
``h = time / substeps`` and *checks* ``h * (4 max D + 4 max |v|) <= 0.8`` at run time
(an error naming ``substeps``, never a silently oscillating or negative field);
:func:`stable_substeps` gives the smallest safe count.
"""

import functools
import math

import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, ArrayLike, Float, Real

from jaxkit import _validate
from jaxkit._numerics import iota_like
from jaxkit._typing import KeyArray

STABILITY = 0.8  # h * (4 D_max + 4 |v|_max) <= STABILITY keeps the scheme positive


def _box_mean(x: Array, k: int) -> Array:
    """Mean over a ``k x k`` window (edge-replicated borders), same shape as ``x``.

    Separable sums of shifted slices (differentiable in both modes).
    """
    p = k // 2
    hh, ww = x.shape
    xp = jnp.pad(x, ((p, p), (p, p)), mode="edge")
    rows = sum(xp[i : i + hh, :] for i in range(k))
    return sum(rows[:, j : j + ww] for j in range(k)) / (k * k)


def _gradient(img: Array) -> tuple[Array, Array]:
    """``np.gradient`` of a 2-D image: (d/drow, d/dcol), central inside, one-sided at edges."""
    gy, gx = jnp.gradient(img)
    return gy, gx


def _diffusivity_core(img, d0, beta, alpha):
    gy, gx = _gradient(img)
    tiny = jnp.asarray(1e-12, img.dtype)
    gmag = jnp.sqrt(gy * gy + gx * gx + tiny) - jnp.sqrt(tiny)  # finite gradient at 0
    mean = _box_mean(img, 5)
    var = jnp.maximum(_box_mean(img * img, 5) - mean * mean, 0.0)
    ent = jnp.sqrt(var + jnp.asarray(1e-12, img.dtype)) - jnp.asarray(1e-6, img.dtype)
    cost = alpha * gmag + (1 - alpha) * jnp.maximum(ent, 0.0)
    return d0 * jnp.exp(-beta * cost)


_diffusivity_jit = jax.jit(jnp.vectorize(_diffusivity_core, signature="(h,w),(),(),()->(h,w)"))


def _check_image(image, name: str = "image") -> Array:
    _validate.floating(image, name=name)  # before jnp.asarray: a string names `name`
    image = jnp.asarray(image)
    _validate.min_ndim(image, 2, name=name)
    if image.shape[-1] < 2 or image.shape[-2] < 2:
        raise TypeError(f"`{name}` must have H, W >= 2 in its last two axes, got {image.shape}.")
    return image


def diffusivity(
    image: Float[ArrayLike, "..."],
    *,
    d0: Real[ArrayLike, "..."] = 3.2,
    beta: Real[ArrayLike, "..."] = 6.0,
    alpha: Real[ArrayLike, "..."] = 0.6,
) -> Float[Array, "..."]:
    """Edge-stopping diffusivity ``D = d0 * exp(-beta * (alpha |grad I| + (1-alpha) E))``.

    ``grad I`` is ``np.gradient``'s central difference; ``E`` is the 5x5 local standard
    deviation of ``I`` (a smooth, differentiable stand-in for the repo's 5x5 rank
    entropy, which has no gradient). ``I`` should lie in [0, 1] (the pseudo-label path
    min-max normalises). ``0 < D <= d0`` everywhere. Jitted like jax.numpy.

    Args:
      image: Grey images ``[..., H, W]`` (floating, H, W >= 2); any leading batch axes
        (one ``[H, W]`` image included), each image diffused on its own.
      d0: Peak diffusivity, > 0 (traced).
      beta: Edge-stopping strength, >= 0 (traced).
      alpha: Gradient vs local-texture mix in [0, 1] (traced).

    Returns:
      ``D`` with the shape and dtype of ``image``.

    Raises:
      TypeError: ``image`` not floating (a string included), rank < 2 or H or W < 2.
      ValueError: ``d0 <= 0``, ``beta < 0`` or ``alpha`` outside [0, 1] (NaN too).
    """
    image = _check_image(image)
    dt = image.dtype
    image = _validate.guard_positive(image, d0, name="d0")  # before the core: no compile
    image = _validate.guard_non_negative(image, beta, name="beta")
    image = _validate.guard_interval(image, alpha, name="alpha", low=0.0, high=1.0)
    return _diffusivity_jit(
        image, jnp.asarray(d0, dt), jnp.asarray(beta, dt), jnp.asarray(alpha, dt)
    )


# ------------------------------------------------------------------ Fokker-Planck solver


def _fp_substep(u, d, vy, vx, h):
    """One explicit finite-volume step of ``du/dt = lap(D u) - div(u v)`` (zero-flux walls).

    Face fluxes: diffusion ``-(D u)_{i+1} + (D u)_i`` (Ito ordering), advection upwind
    with the face velocity ``(v_i + v_{i+1}) / 2``. Boundary faces carry no flux, so
    the total mass telescopes exactly (reflecting boundaries).
    """
    du = d * u
    vfx = 0.5 * (vx[:, 1:] + vx[:, :-1])
    fx = (du[:, :-1] - du[:, 1:]) + jnp.maximum(vfx, 0) * u[:, :-1] + jnp.minimum(vfx, 0) * u[:, 1:]
    vfy = 0.5 * (vy[1:, :] + vy[:-1, :])
    fy = (du[:-1, :] - du[1:, :]) + jnp.maximum(vfy, 0) * u[:-1, :] + jnp.minimum(vfy, 0) * u[1:, :]
    fx = jnp.pad(fx, ((0, 0), (1, 1)))
    fy = jnp.pad(fy, ((1, 1), (0, 0)))
    return u - h * ((fx[:, 1:] - fx[:, :-1]) + (fy[1:, :] - fy[:-1, :]))


def _fp_single(u0, d, v, time, substeps):
    h = time / substeps
    vy, vx = v[0], v[1]

    def body(_, u):
        return _fp_substep(u, d, vy, vx, h)

    u = jax.lax.fori_loop(0, substeps, body, u0)
    cfl = h * (4 * jnp.max(d) + 4 * jnp.maximum(jnp.max(jnp.abs(vy)), jnp.max(jnp.abs(vx))))
    return u, cfl


def _fp_core(u0, d, v, time, *, substeps):
    f = jnp.vectorize(
        functools.partial(_fp_single, substeps=substeps),
        signature="(h,w),(h,w),(c,h,w),()->(h,w),()",
    )
    u, cfl = f(u0, d, v, time)
    msg = (
        f"`substeps` = {substeps} is too small: the explicit step h = time / substeps must "
        f"satisfy h * (4 max D + 4 max |v|) <= {STABILITY} (use stable_substeps)."
    )
    return _validate.error_if(u, jnp.any(~(cfl <= STABILITY)), msg)


_fp_jit = jax.jit(_fp_core, static_argnames=("substeps",))


def _check_cfl_now(d, velocity, time, substeps) -> None:
    """The stability bound, checked at once when the inputs are concrete (ValueError)."""
    if any(isinstance(a, jax.core.Tracer) for a in (d, velocity, time)):
        return  # checked at run time inside the jitted core
    t = np.asarray(time, np.float64)
    if not np.all(np.isfinite(t)):
        return  # the time guard reports it
    d_max = float(np.max(np.asarray(d, np.float64))) if d.size else 0.0
    v_max = float(np.max(np.abs(np.asarray(velocity, np.float64)))) if velocity.size else 0.0
    t_max = float(np.max(t)) if t.size else 0.0  # an empty batch: nothing to diffuse
    cfl = t_max / substeps * (4 * d_max + 4 * v_max)
    if cfl > STABILITY:
        raise ValueError(
            f"`substeps` = {substeps} is too small: h * (4 max D + 4 max |v|) = {cfl:.3g} > "
            f"{STABILITY}; stable_substeps gives "
            f"{stable_substeps(t_max, max(d_max, 0.0), v_max)}."
        )


def stable_substeps(time: float, d_max: float, v_max: float = 0.0) -> int:
    """Smallest sub-step count with ``(time / n) * (4 d_max + 4 v_max) <= 0.8`` (host-side).

    With the repo's ``d0 = 3.2``, ``dt = 0.2`` and ``|v| <= 0.5`` this is 4 per step
    (the repo takes 1 and is unstable).
    """
    for name, val in (("time", time), ("d_max", d_max), ("v_max", v_max)):
        _validate.real(val, name=name)  # float() would parse a string
        if not (math.isfinite(float(val)) and float(val) >= 0):
            raise ValueError(f"`{name}` must be finite and >= 0, got {name}={val!r}.")
    return max(1, math.ceil(float(time) * (4 * float(d_max) + 4 * float(v_max)) / STABILITY))


def fokker_planck(
    u0: Float[ArrayLike, "..."],
    d: Float[ArrayLike, "..."],
    velocity: Float[ArrayLike, "..."] | None = None,
    *,
    time: Real[ArrayLike, "..."],
    substeps: int,
) -> Float[Array, "..."]:
    """Evolve a density by ``du/dt = lap(D u) - div(u v)`` with reflecting walls.

    Deterministic and differentiable counterpart of :func:`particle_diffuse` (same Ito
    model; spec §4.3 [R]). Finite volumes on the pixel grid: Ito-ordered diffusion flux
    ``(D u)_i - (D u)_{i+1}`` and first-order upwind advection with face velocities,
    ``substeps`` explicit Euler sub-steps of ``h = time / substeps``. Zero flux through
    the image border makes ``sum(u)`` exactly conserved; under the bound
    ``h (4 max D + 4 max|v|) <= 0.8`` every update is a convex-like combination with
    non-negative weights, so ``u >= 0`` is kept. The bound is checked at run time
    (error naming ``substeps``): the repo's single unstable step is never taken.
    With constant ``D`` and ``v = 0`` a point source keeps its mean and its per-axis
    variance grows by exactly ``2 D time`` (until it reaches the border). Jitted like
    jax.numpy (``substeps`` static, ``time`` traced).

    Args:
      u0: Initial densities ``[..., H, W]`` (e.g. a unit mass at a point).
      d: Diffusivity, same shape (>= 0; see :func:`diffusivity`).
      velocity: Drift ``[..., 2, H, W]`` as (row, col) components, or None for none.
      time: Total diffusion time >= 0 (traced; scalar or per batch element).
      substeps: Number of explicit sub-steps (static int >= 1); see
        :func:`stable_substeps`.

    Returns:
      The density at ``time`` (shape and dtype of ``u0``).

    Raises:
      TypeError: Non-floating ``u0`` or ``d`` (a string included), mismatched shapes,
        ``substeps`` not an int.
      ValueError: ``substeps < 1``, ``time < 0``, negative or non-finite ``d``, or
        (at run time) ``substeps`` too small for the stability bound.
    """
    u0 = _check_image(u0, "u0")
    _validate.floating(d, name="d")  # before jnp.asarray: a string names `d`
    d = jnp.asarray(d)
    if d.shape != u0.shape:
        raise TypeError(f"`d` must have the shape of `u0` {u0.shape}, got {d.shape}.")
    if velocity is None:
        velocity = jnp.stack([jnp.zeros_like(u0)] * 2, axis=-3)  # keeps u0's sharding
    velocity = _validate.real_array(velocity, name="velocity")
    want = (*u0.shape[:-2], 2, *u0.shape[-2:])
    if velocity.shape != want:
        raise TypeError(f"`velocity` must have shape {want}, got {velocity.shape}.")
    substeps = _validate.python_int(substeps, name="substeps", minimum=1)
    dt = u0.dtype
    t = jnp.asarray(time, dt)
    u0 = _validate.guard_non_negative(u0, time, name="time")  # before the CFL check: NaN
    _check_cfl_now(d, velocity, time, substeps)
    out = _fp_jit(u0, d.astype(dt), velocity.astype(dt), t, substeps=substeps)
    return _validate.error_if(
        out, ~jnp.all((d >= 0) & jnp.isfinite(d)), "`d` must be finite and >= 0 everywhere."
    )


# ------------------------------------------------------------------ particles


def _particles_single(key, d, v, point, time, *, n_particles, steps):
    hh, ww = d.shape
    dtp = d.dtype
    dt = time / steps
    pos0 = jnp.broadcast_to(point.astype(dtp), (n_particles, 2))
    lo = jnp.asarray(-0.5, dtp)
    hi = jnp.asarray([hh - 0.5, ww - 0.5], dtp)

    def nearest(pos):
        # nearest pixel: round (not a floor, the repo's astype(int) bug), then clip so
        # negative or out-of-range coordinates never wrap
        iy = jnp.clip(jnp.round(pos[:, 0]).astype(jnp.int32), 0, hh - 1)
        ix = jnp.clip(jnp.round(pos[:, 1]).astype(jnp.int32), 0, ww - 1)
        return iy, ix

    def body(i, pos):
        iy, ix = nearest(pos)
        vel = jnp.stack([v[0][iy, ix], v[1][iy, ix]], axis=-1)
        sd = jnp.sqrt(2 * d[iy, ix] * dt)[:, None]
        xi = jax.random.normal(jax.random.fold_in(key, i), pos.shape, dtp)
        pos = pos + vel * dt + sd * xi
        pos = jnp.where(pos < lo, 2 * lo - pos, pos)  # reflect at the walls
        pos = jnp.where(pos > hi[None], 2 * hi[None] - pos, pos)
        return jnp.clip(pos, lo, hi[None])

    pos = jax.lax.fori_loop(0, steps, body, pos0)
    iy, ix = nearest(pos)
    counts = jax.ops.segment_sum(jnp.ones((n_particles,), dtp), iy * ww + ix, hh * ww)
    return (counts / n_particles).reshape(hh, ww)


def _particles_core(key, d, v, points, time, *, n_particles, steps):
    lead = d.shape[:-2]
    hw = d.shape[-2:]
    d2 = d.reshape(-1, *hw)
    v2 = v.reshape(-1, 2, *hw)
    p2 = points.reshape(-1, *points.shape[-2:])
    t2 = (jnp.zeros_like(d[..., 0, 0]) + time).reshape(-1)  # carries d's sharding
    nk = p2.shape[1]
    # one key per (image, point), built on an index array carrying the points' sharding
    idx = (
        iota_like(p2[..., 0], jnp.uint32) + jnp.uint32(nk) * iota_like(p2[:, :1, 0].T, jnp.uint32).T
    )
    keys = jax.vmap(jax.vmap(lambda i: jax.random.fold_in(key, i)))(idx)
    f = functools.partial(_particles_single, n_particles=n_particles, steps=steps)
    per_target = jax.vmap(f, in_axes=(0, None, None, 0, None))
    out = jax.vmap(per_target)(keys, d2, v2, p2, t2)
    return out.reshape(*lead, *out.shape[1:])


_particles_jit = jax.jit(_particles_core, static_argnames=("n_particles", "steps"))


def particle_diffuse(
    d: Float[ArrayLike, "..."],
    velocity: Float[ArrayLike, "..."] | None,
    points: Real[ArrayLike, "..."],
    *,
    key: KeyArray,
    time: Real[ArrayLike, "..."],
    n_particles: int = 260,
    steps: int = 40,
) -> Float[Array, "..."]:
    """Histogram of Euler-Maruyama particles of ``dX = v dt + sqrt(2 D) dW`` (the repo's path).

    ``n_particles`` start at each point (row, col) and take ``steps`` steps of
    ``dt = time / steps`` with nearest-pixel lookup of ``D`` and ``v`` (rounded and
    clipped, so negative coordinates cannot wrap) and mirror reflection at the image
    border (pixel centres at 0..H-1, walls at -0.5 and H-0.5). Returns, per point, the
    fraction of particles ending on each pixel (each map sums to 1). In expectation
    this is the Fokker-Planck density of :func:`fokker_planck` as ``dt -> 0``. Not
    differentiable (sampling). Jitted (``n_particles``, ``steps`` static); every
    (image, point) pair draws from its own split of ``key``.

    Defaults: the authors' Spot setting in ``train.py`` (260 particles, 40 steps; with
    their ``dt`` = 0.2 that is ``time`` = 8). Their Point setting is 20 particles, 3
    steps, ``time`` 0.54; Extended 400, 120, ``time`` 48 (chosen there by a GT-derived
    type). Differences: rounding instead of their ``astype(int)`` floor (a half-pixel
    bias), and reflection at the image walls (theirs lets particles leave the crop and
    piles them on its border pixels), as the reflecting Fokker-Planck model requires.

    Args:
      d: Diffusivity ``[..., H, W]`` (>= 0).
      velocity: Drift ``[..., 2, H, W]`` or None.
      points: Start points ``[..., K, 2]`` in pixel coordinates (row, col).
      key: A typed PRNG key.
      time: Total time >= 0 (traced; scalar or per image).
      n_particles: Particles per point (static int >= 1).
      steps: Euler-Maruyama steps (static int >= 1).

    Returns:
      ``[..., K, H, W]`` occupation fractions, dtype of ``d``.

    Raises:
      TypeError: Wrong ranks or shapes, non-int sizes, a non-floating ``d`` or
        non-real ``points`` (a string included).
      ValueError: Sizes < 1, ``time < 0``, negative ``d``, a NaN/inf point.
    """
    _validate.is_key(key)
    d = _check_image(d, "d")
    lead = d.shape[:-2]
    if velocity is None:
        velocity = jnp.stack([jnp.zeros_like(d)] * 2, axis=-3)  # keeps d's sharding
    velocity = _validate.real_array(velocity, name="velocity")
    if velocity.shape != (*lead, 2, *d.shape[-2:]):
        raise TypeError(
            f"`velocity` must have shape {(*lead, 2, *d.shape[-2:])}, got {velocity.shape}."
        )
    points = _validate.real_array(points, name="points")
    if points.ndim != len(lead) + 2 or points.shape[-1] != 2 or points.shape[:-2] != lead:
        raise TypeError(f"`points` must have shape [*{lead}, K, 2], got {points.shape}.")
    points = _validate.all_finite(points, name="points")  # NaN: particles from a border pixel
    n_particles = _validate.python_int(n_particles, name="n_particles", minimum=1)
    steps = _validate.python_int(steps, name="steps", minimum=1)
    t = jnp.asarray(time, d.dtype)
    if t.ndim > len(lead) or t.shape != lead[len(lead) - t.ndim :]:
        raise TypeError(f"`time` must be a scalar or of shape {lead}, got {t.shape}.")
    out = _particles_jit(
        key,
        d,
        velocity.astype(d.dtype),
        points.astype(d.dtype),
        t,
        n_particles=n_particles,
        steps=steps,
    )
    out = _validate.guard_non_negative(out, time, name="time")
    return _validate.error_if(
        out, ~jnp.all((d >= 0) & jnp.isfinite(d)), "`d` must be finite and >= 0 everywhere."
    )


def point_sources(points: Real[ArrayLike, "..."], hw: tuple[int, int], dtype=jnp.float32) -> Array:
    """Unit masses at the rounded, clipped points: ``[K, H, W]`` (jittable helper).

    Raises:
      TypeError: If ``points`` is not a real ``[K, 2]`` array (a string included).
      ValueError: If a point is NaN or infinite (it landed on a clipped border pixel).
    """
    _validate.real(points, name="points")  # a string: JAX's error named no argument
    points = jnp.asarray(points)
    if points.ndim != 2 or points.shape[-1] != 2:
        raise TypeError(f"`points` must have shape [K, 2], got {points.shape}.")
    return _point_sources(_validate.all_finite(points, name="points"), hw, dtype)


def _point_sources(points, hw, dtype):
    """:func:`point_sources` without checks (callers inside a jitted core)."""
    h, w = hw
    iy = jnp.clip(jnp.round(points[:, 0]).astype(jnp.int32), 0, h - 1)
    ix = jnp.clip(jnp.round(points[:, 1]).astype(jnp.int32), 0, w - 1)
    rows = jnp.arange(h, dtype=jnp.int32)[None, :, None] == iy[:, None, None]
    cols = jnp.arange(w, dtype=jnp.int32)[None, None, :] == ix[:, None, None]
    return (rows & cols).astype(dtype)
