"""AdLift: lifting adversarial image perturbations into safeguard Gaussians (spec vision.md 5).

``G = G_raw U G_s(theta)``: only the safeguard parameters ``theta`` train, the raw asset stays
frozen. Lifted PGD, per training view and round:

1. Render ``x = R(G, v)``; take ``g = grad_x L_adv(x)`` with ``x`` a leaf (a real
   ``stop_gradient``: nothing flows from the editor into the Gaussians) and the projected
   sign step ``x~ = clip_[0,1](x_raw + clip_[-e,e](x - a sign(g) - x_raw))`` with the
   fitting bound ``e = eta (1 - margin)``.
2. Fit ``theta`` to ``x~`` for ``n_fit`` Adam steps on ``mean (R(G, v) - x~)^2`` plus the
   optional augmented-Lagrangian term of ``|R(G, v) - x_raw| <= e`` (penalty ``hinge``,
   per-view multipliers updated after each visit): fitting alone does not bound the render.

After the rounds an optional projection phase (``n_project``) takes Adam steps on the
squared excess over ``e`` of all training views at once, only while some value exceeds it.
These bound the views they see. ``certify=True`` bounds every view instead: after every step
the safeguard opacities are scaled so that :func:`certified_linf`, a view-independent bound of
the rendered change (alpha compositing is convex per pixel), stays under ``e``.

``mode="end_to_end"`` is the other baseline: Adam on ``theta`` directly through the renderer,
on ``L_adv(R(G, v))`` plus the same penalty. Safeguard means are clamped to the asset's bounding box
after every step. The editor enters only through ``adv_loss(loss_params, x, x_raw)`` (a
differentiable callable, minimised; e.g. an encoder attack toward a grey target).
"""

from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from jaxkit import _validate
from jaxkit.splat import _certify
from jaxkit.splat._raster import _render_core, guard_camera, render_options
from jaxkit.splat._safeguards import Safeguards as Safeguards
from jaxkit.splat._safeguards import _check_cameras, _checked
from jaxkit.splat._safeguards import certified_linf as certified_linf
from jaxkit.splat._safeguards import init_safeguards as init_safeguards
from jaxkit.splat._safeguards import protected_scene as protected_scene
from jaxkit.splat._safeguards import safeguard_gaussians as safeguard_gaussians
from jaxkit.splat._types import Camera, Gaussians

MODES = ("lifted", "end_to_end")
"""The values of ``mode=``: ``"lifted"`` (Lifted PGD) or ``"end_to_end"`` (Adam on ``theta``)."""


class LiftedPGDResult(NamedTuple):
    """Result of :func:`lifted_pgd`.

    Attributes:
      safeguards: The trained :class:`Safeguards`.
      fit_loss: ``(n_outer, V)`` last fitting loss per round and view (lifted: MSE to the
        PGD target plus penalty; end_to_end: adversarial loss plus penalty).
      train_linf: ``(V,)`` rendered L-infinity perturbation ``max |R(G) - R(G_raw)|`` of
        each training view after the projection phase.
      project_steps: Number of projection steps taken (int32 scalar; 0 when the training
        views already met the fitting bound or ``n_project = 0``).
    """

    safeguards: Safeguards
    fit_loss: Any
    train_linf: Any
    project_steps: Any


class Protection(NamedTuple):
    """Result of :func:`evaluate_protection`, one entry per view.

    Attributes:
      adv_rel: ``L_adv(protected) / L_adv(raw)`` (lower means more protection).
      linf: ``max |R(G) - R(G_raw)|`` (rendered L-infinity perturbation).
      psnr: PSNR in dB of the protected render against the raw one (peak 1).
    """

    adv_rel: Any
    linf: Any
    psnr: Any


def _pgd_step(x, x_raw, grad, eta, step):
    delta = jnp.clip(x - step * jnp.sign(grad) - x_raw, -eta, eta)
    return jnp.clip(x_raw + delta, 0.0, 1.0)


_pgd_jit = jax.jit(_pgd_step)


def pgd_image_step(x, x_raw, grad, *, eta, step) -> jax.Array:
    """``clip_[0,1](x_raw + clip_[-eta,eta](x - step * sign(grad) - x_raw))`` (pure).

    A projected signed-gradient descent step on a loss whose gradient is ``grad``; the
    result stays within ``eta`` of ``x_raw`` (L-infinity) and inside [0, 1].

    Example:
      >>> pgd_image_step(jnp.array([0.5]), jnp.array([0.5]), jnp.array([1.0]),
      ...                eta=0.1, step=0.3).tolist()
      [0.4000000059604645]
    """
    x, x_raw, grad = (jnp.asarray(a) for a in (x, x_raw, grad))
    for name, a in (("x", x), ("x_raw", x_raw), ("grad", grad)):
        _validate.floating(a, name=name)
    _validate.same_shape(x=x, x_raw=x_raw, grad=grad)
    x = _validate.guard_positive(x, eta, name="eta")
    x = _validate.guard_positive(x, step, name="step")
    return _pgd_jit(x, x_raw, grad, eta, step)


def _render(g, cam, bg, near, rk):
    # the raw covariances are checked once by the public wrapper (a concrete check, or a
    # runtime error under jit); safeguard covariances are PSD by construction
    return _render_core(g, cam, bg, near, check_psd=False, **rk)


def _adam_step(theta, grad, state, lr, b1=0.9, b2=0.999, eps=1e-8):
    """One Adam step, ``optax.adam``'s update rule.

    The step counter is kept in the float dtype so the step runs under strict promotion.
    """
    count, m, v = state
    count = count + 1
    m = jax.tree.map(lambda a, g: b1 * a + (1 - b1) * g, m, grad)
    v = jax.tree.map(lambda a, g: b2 * a + (1 - b2) * g * g, v, grad)
    c1, c2 = 1 - b1**count, 1 - b2**count
    theta = jax.tree.map(lambda p, a, b: p - lr * (a / c1) / (jnp.sqrt(b / c2) + eps), theta, m, v)
    return theta, (count, m, v)


def _al_penalty(r, x_raw, lam, eta, rho):
    """PHR augmented-Lagrangian term of ``|r - x_raw| <= eta`` (per value, mean over values).

    ``mean(relu(lam + rho * g)^2) / (2 rho)`` with ``g = |r - x_raw| - eta``; its gradient is
    ``relu(lam + rho g) * dg``. The ``-lam^2 / (2 rho)`` constant is dropped. ``rho = 0``
    (with ``lam = 0``) switches it off.
    """
    g = jnp.abs(r - x_raw) - eta
    safe = jnp.where(rho > 0, rho, jnp.ones_like(rho))
    return jnp.mean(jnp.square(jax.nn.relu(lam + rho * g))) / (2 * safe)


def _lifted_core(
    raw, theta0, cams, bound_cams, loss_params, eta, step, fit_lr, hinge, margin, bg, near, *,
    adv_loss,
    hw, n_outer, n_fit, n_project, mode, method, tile, capacity, cutoff, certify,
):  # fmt: skip
    rk = {"hw": hw, "method": method, "tile": tile, "capacity": capacity, "cutoff": cutoff}

    def raw_renders(cs):
        return jax.vmap(lambda c: _render(raw, c, bg, near, rk))(cs)

    x_raw_all = raw_renders(cams)
    lo, hi = jnp.min(raw.means, axis=0), jnp.max(raw.means, axis=0)
    eta_fit = eta * (1 - margin)  # the bound the fitting aims at (a safety margin under eta)

    def feasible(th):  # means in the box; with certify, the certificate under eta_fit
        th = th._replace(means=jnp.clip(th.means, lo[None, :], hi[None, :]))
        if not certify:
            return th
        budget = eta_fit * (1 - 1e-4)  # float rounding of the scaled logits stays under
        o = _certify.scale_to_budget(th.opacity_logits, th.color_logits, raw.colors, bg, budget)
        return th._replace(opacity_logits=o)

    def rendered(th, cam):
        return _render(protected_scene(raw, th), cam, bg, near, rk)

    def adam_fit(loss_fn, th, st):
        val, gr = jax.value_and_grad(loss_fn)(th)
        th, st = _adam_step(th, gr, st, fit_lr)
        return feasible(th), st, val

    def view(carry, inp):
        theta, state = carry
        cam, x_raw, lam = inp

        if mode == "lifted":
            x = jax.lax.stop_gradient(rendered(theta, cam))  # gradient truncation at the image
            g = jax.grad(adv_loss, argnums=1)(loss_params, x, x_raw)
            target = _pgd_step(x, x_raw, g, eta_fit, step)  # projected onto the fitting bound

            def loss_fn(th):
                r = rendered(th, cam)
                return jnp.mean((r - target) ** 2) + _al_penalty(r, x_raw, lam, eta_fit, hinge)

        else:

            def loss_fn(th):
                r = rendered(th, cam)
                return adv_loss(loss_params, r, x_raw) + _al_penalty(r, x_raw, lam, eta_fit, hinge)

        def fit(_, c):
            return adam_fit(loss_fn, *c[:2])

        theta, state, val = jax.lax.fori_loop(
            0, n_fit, fit, (theta, state, jnp.zeros((), raw.means.dtype))
        )
        # multiplier update of this view's constraint (stays 0 when hinge = 0)
        gap = jnp.abs(rendered(theta, cam) - x_raw) - eta_fit
        return (theta, state), (val, jax.nn.relu(lam + hinge * gap))

    def round_(carry, _):
        (theta, state), lam = carry
        new, (val, lam) = jax.lax.scan(view, (theta, state), (cams, x_raw_all, lam))
        return (new, lam), val

    def zeros_state(th):
        return (jnp.zeros((), raw.means.dtype), *(jax.tree.map(jnp.zeros_like, th),) * 2)

    lam0 = jnp.zeros_like(x_raw_all)
    theta0 = feasible(theta0)
    ((theta, _), _), hist = jax.lax.scan(
        round_, ((theta0, zeros_state(theta0)), lam0), None, length=n_outer
    )

    if n_project == 0:
        r = jax.vmap(rendered, in_axes=(None, 0))(theta, cams)
        linf = jnp.max(jnp.abs(r - x_raw_all), axis=(1, 2, 3))
        return LiftedPGDResult(theta, hist, linf, jnp.zeros((), jnp.int32))

    # projection phase: Adam on the mean squared excess over eta_fit of all bound views
    # (training views plus bound_cams), run only while some rendered value still exceeds
    # the bound (at most n_project steps)
    pc, pr = cams, x_raw_all
    if bound_cams is not None:
        pc = jax.tree.map(lambda a, b: jnp.concatenate([a, b]), cams, bound_cams)
        pr = jnp.concatenate([x_raw_all, raw_renders(bound_cams)])

    def render_p(th):
        return jax.vmap(rendered, in_axes=(None, 0))(th, pc)

    def proj_loss(th):  # aims 10% inside the bound: Adam's fixed-size steps hover around
        # the level they aim at, so aiming at the stopping level itself may never stop
        return jnp.mean(jnp.square(jax.nn.relu(jnp.abs(render_p(th) - pr) - 0.9 * eta_fit)))

    def worst(r):
        return jnp.max(jnp.abs(r - pr) - eta_fit)

    def p_cond(c):
        return (c[2] < n_project) & (c[3] > 0)

    def p_body(c):
        th, st, i, _ = c
        th, st, _ = adam_fit(proj_loss, th, st)
        return th, st, i + 1, worst(render_p(th))

    init = (theta, zeros_state(theta), jnp.zeros((), jnp.int32), worst(render_p(theta)))
    theta, _, n_proj, _ = jax.lax.while_loop(p_cond, p_body, init)
    r = jax.vmap(rendered, in_axes=(None, 0))(theta, cams)
    linf = jnp.max(jnp.abs(r - x_raw_all), axis=(1, 2, 3))
    return LiftedPGDResult(theta, hist, linf, n_proj)


_STATIC = (
    "adv_loss", "hw", "n_outer", "n_fit", "n_project", "mode", "method", "tile", "capacity",
    "cutoff", "certify",
)  # fmt: skip
_lifted_jit = jax.jit(_lifted_core, static_argnames=_STATIC)


def lifted_pgd(
    raw: Gaussians,
    theta0: Safeguards,
    cameras: Camera,
    adv_loss: Callable[[Any, jax.Array, jax.Array], jax.Array],
    loss_params: Any,
    *,
    hw: tuple[int, int],
    eta=8 / 255,
    step=4 / 255,
    fit_lr=5e-3,
    hinge=0.0,
    margin=0.0,
    n_outer: int = 8,
    n_fit: int = 10,
    n_project: int = 0,
    bound_cameras: Camera | None = None,
    certify: bool = False,
    mode: str = "lifted",
    background=0.0,
    near=0.2,
    method: str = "dense",
    tile: int = 16,
    capacity: int = 64,
    cutoff: float | None = None,
) -> LiftedPGDResult:
    """Train safeguard Gaussians by Lifted PGD (or end-to-end PGD) over training views.

    One jitted program: a ``lax.scan`` over rounds of a ``lax.scan`` over views, each view
    running ``n_fit`` Adam steps (module docstring for the steps).

    Args:
      raw: The frozen asset (:class:`Gaussians`).
      theta0: Initial :class:`Safeguards` (:func:`init_safeguards`).
      cameras: Training views: one :class:`Camera` with a leading view axis.
      adv_loss: ``adv_loss(loss_params, x, x_raw) -> scalar`` to minimise, ``x`` an
        ``(H, W, 3)`` render; static (pass a module-level function, not a fresh closure,
        or every call recompiles); differentiable in ``x``.
      loss_params: Pytree of the loss's arrays (e.g. editor weights, target latent); traced.
      hw: Static image size.
      eta: L-infinity bound of the image perturbation (traced, > 0).
      step: Sign-step size ``a`` (traced, > 0).
      fit_lr: Adam learning rate on ``theta`` (traced, > 0).
      hinge: Penalty parameter ``rho`` of the augmented Lagrangian of the bound
        ``|R(G, v) - x_raw| <= eta (1 - margin)`` in every fit (traced, >= 0; 0 switches
        the penalty and the multipliers off). Each view keeps per-value multipliers
        ``lam <- relu(lam + rho g)`` (``g`` the excess over the bound after its fit),
        carried across rounds, so a violation that persists is priced ever higher.
      margin: Safety margin (traced, in [0, 1)): the PGD targets are projected onto, and the
        penalty and projection phase aim at, ``eta (1 - margin)``, so that views never
        fitted (novel views) keep some room under ``eta``.
      n_outer: Static number of rounds over the views.
      n_fit: Static Adam steps per view visit.
      n_project: Static cap on the projection phase after the rounds: Adam steps on the
        mean squared excess over ``0.9 eta (1 - margin)`` of all training views at once, taken
        only while some rendered value of a training view exceeds that bound (a
        ``lax.while_loop``; 0 switches it off). ``LiftedPGDResult.project_steps`` says
        how many ran and ``train_linf`` what remains.
      bound_cameras: Optional extra views (a :class:`Camera` with a leading view axis) on
        which the projection phase also enforces the bound; no adversarial target is
        computed on them. The bound is a property of the asset, checkable from any pose:
        random poses here make it hold more densely between training views (keep the
        evaluation's novel views out of them).
      certify: Static. Keep :func:`certified_linf` ``<= eta (1 - margin)`` from the start
        and after every step (all opacities scaled by one factor when it is exceeded): the
        rendered change is then within the bound at every pixel of every view, novel ones
        included, not only on the views checked. A worst-case bound: it leaves little
        opacity to perturb with (measured in ``examples/adlift_toy.py``).
      mode: ``"lifted"`` (gradient truncation + image-space PGD + fitting) or
        ``"end_to_end"`` (the adversarial loss differentiated through the renderer).
      background: Background colour (as :func:`jaxkit.splat.render`).
      near: Near-plane depth (as :func:`jaxkit.splat.render`).
      method: Rasterizer path, ``"dense"`` or ``"tiled"`` (as :func:`jaxkit.splat.render`).
      tile: Tile side of the tiled path.
      capacity: Gaussians per tile of the tiled path.
      cutoff: Footprint truncation in sigma (as :func:`jaxkit.splat.render`).

    Raises:
      TypeError: bad scene/camera/safeguard shapes, ``adv_loss`` not callable.
      ValueError: unknown ``mode``/``method``; non-positive ``eta``, ``step``, ``fit_lr``;
        negative ``hinge``, ``n_project``; ``margin`` outside [0, 1).
    """
    _validate.one_of(MODES, mode=mode)
    method, tile, capacity, cutoff = render_options(method, tile, capacity, cutoff)
    _validate.flags(certify=certify)
    n_outer = _validate.python_int(n_outer, name="n_outer", minimum=1)
    n_fit = _validate.python_int(n_fit, name="n_fit", minimum=1)
    n_project = _validate.python_int(n_project, name="n_project", minimum=0)
    hw, raw = _checked(raw, theta0, cameras, adv_loss, hw)
    if bound_cameras is not None:
        _check_cameras(bound_cameras, raw.means.dtype, name="bound_cameras")
    m = raw.means
    m = _validate.guard_positive(m, eta, name="eta")
    m = _validate.guard_positive(m, step, name="step")
    m = _validate.guard_positive(m, fit_lr, name="fit_lr")
    m = _validate.guard_non_negative(m, hinge, name="hinge")
    m = _validate.guard_interval(m, margin, name="margin", low=0.0, high=1.0, closed="left")
    m = _validate.guard_positive(m, near, name="near")
    m = _validate.guard_finite(guard_camera(m, cameras), background, name="background")
    return _lifted_jit(
        raw._replace(means=m), theta0, cameras, bound_cameras, loss_params, eta, step, fit_lr,
        hinge, margin, background, near, adv_loss=adv_loss, hw=hw, n_outer=n_outer,
        n_fit=n_fit, n_project=n_project, mode=mode, method=method, tile=tile,
        capacity=capacity, cutoff=cutoff, certify=certify,
    )  # fmt: skip


def _eval_core(raw, theta, cams, loss_params, bg, near, *, adv_loss, hw):
    rk = {"hw": hw, "method": "dense", "tile": 16, "capacity": 64, "cutoff": None}
    prot = protected_scene(raw, theta)

    def one(cam):
        x_raw = _render(raw, cam, bg, near, rk)
        x = _render(prot, cam, bg, near, rk)
        rel = adv_loss(loss_params, x, x_raw) / adv_loss(loss_params, x_raw, x_raw)
        mse = jnp.mean((x - x_raw) ** 2)
        return rel, jnp.max(jnp.abs(x - x_raw)), -10.0 * jnp.log10(mse)

    return Protection(*jax.vmap(one)(cams))


_eval_jit = jax.jit(_eval_core, static_argnames=("adv_loss", "hw"))


def evaluate_protection(
    raw: Gaussians,
    theta: Safeguards,
    cameras: Camera,
    adv_loss: Callable[[Any, jax.Array, jax.Array], jax.Array],
    loss_params: Any,
    *,
    hw: tuple[int, int],
    background=0.0,
    near=0.2,
) -> Protection:
    """Per view: ``L_adv`` ratio protected/raw, rendered L-infinity and PSNR (dense path).

    ``adv_loss`` as in :func:`lifted_pgd`; it must be positive on the raw renders (the
    ratio's denominator). Evaluate novel views that were never used in fitting.
    """
    hw, raw = _checked(raw, theta, cameras, adv_loss, hw)
    m = _validate.guard_positive(raw.means, near, name="near")
    m = _validate.guard_finite(guard_camera(m, cameras), background, name="background")
    raw = raw._replace(means=m)
    return _eval_jit(raw, theta, cameras, loss_params, background, near, adv_loss=adv_loss, hw=hw)
