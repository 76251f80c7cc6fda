"""Synthetic FacRNN data with known ground truth: Lorenz + Thomas latents and a teacher lrRNN."""

from typing import NamedTuple

import jax
import jax.numpy as jnp
import optax
from jaxtyping import Array, ArrayLike, Float

from jaxkit import _validate
from jaxkit._optim import optax_update
from jaxkit._typing import KeyArray, RealScalarLike


def _lorenz(s):
    x, y, z = s[0], s[1], s[2]
    return jnp.stack([10.0 * (y - x), x * (28.0 - z) - y, x * y - (8.0 / 3.0) * z])


def _thomas(s, b):
    return jnp.stack([jnp.sin(s[1]) - b * s[0], jnp.sin(s[2]) - b * s[1], jnp.sin(s[0]) - b * s[2]])


def _rk4(f, s, h):
    k1 = f(s)
    k2 = f(s + 0.5 * h * k1)
    k3 = f(s + 0.5 * h * k2)
    k4 = f(s + h * k3)
    return s + (h / 6.0) * (k1 + 2.0 * k2 + 2.0 * k3 + k4)


def _lt(dt, thomas_b, n_steps, substeps, burn_in):
    h = dt / substeps

    def f(s):
        return jnp.concatenate([_lorenz(s[:3]), _thomas(s[3:], thomas_b)])

    def one(s, _):
        s = jax.lax.fori_loop(0, substeps, lambda _, v: _rk4(f, v, h), s)
        return s, s

    s0 = jnp.array([1.0, 1.0, 1.0, 1.0, 0.0, -1.0], jnp.float32)
    _, traj = jax.lax.scan(one, s0, None, length=n_steps + burn_in)
    traj = traj[burn_in:]
    return (traj - jnp.mean(traj, 0, keepdims=True)) / jnp.std(traj, 0, keepdims=True)


_lt_jit = jax.jit(_lt, static_argnames=("n_steps", "substeps", "burn_in"))


def lorenz_thomas(
    n_steps: int,
    *,
    dt: RealScalarLike = 0.1,
    thomas_b: RealScalarLike = 0.2,
    substeps: int = 10,
    burn_in: int = 100,
) -> Float[Array, "t 6"]:
    """Two independent chaotic systems as a 2-group, 6-dimensional latent trajectory.

    Columns 0-2: Lorenz (sigma 10, rho 28, beta 8/3, from (1, 1, 1)); columns 3-5: Thomas's
    cyclically symmetric attractor ``x' = sin y - b x`` (from (1, 0, -1); ``b = 0.2`` keeps
    it bounded and chaotic, the reference's ``b = 0`` is conservative and drifts). RK4 with
    ``substeps`` steps per sample of spacing ``dt``, the first ``burn_in`` samples dropped,
    each column standardised. Deterministic (no key); jitted with the sizes static.

    Args:
      n_steps: Number of samples returned.
      dt: Sample spacing (traced).
      thomas_b: Thomas damping ``b`` (traced).
      substeps: RK4 steps per sample.
      burn_in: Samples discarded at the start.

    Returns:
      ``[n_steps, 6]`` float32, zero mean and unit variance per column.

    Raises:
      TypeError: If a size is not a Python int.
      ValueError: If ``n_steps < 2``, ``substeps < 1``, ``burn_in < 0``, ``dt`` is not
        finite and > 0 or ``thomas_b`` not finite and >= 0 (traced: under ``jit``).

    Example:
      >>> z = lorenz_thomas(50, substeps=2, burn_in=0)
      >>> z.shape, bool(abs(float(z[:, 0].std()) - 1) < 1e-3)
      ((50, 6), True)
    """
    n_steps = _validate.python_int(n_steps, name="n_steps", minimum=2)
    substeps = _validate.python_int(substeps, name="substeps", minimum=1)
    burn_in = _validate.python_int(burn_in, name="burn_in", minimum=0)
    _validate.real(thomas_b, name="thomas_b")
    dt_a = _validate.guard_positive(
        _validate.real_array(dt, name="dt", dtype=jnp.float32), dt, name="dt"
    )
    dt_a = _validate.guard_non_negative(dt_a, thomas_b, name="thomas_b")
    tb = jnp.asarray(thomas_b, jnp.float32)
    return _lt_jit(dt_a, tb, n_steps=n_steps, substeps=substeps, burn_in=burn_in)


class SyntheticRNN(NamedTuple):
    """A teacher low-rank RNN and its activity (:func:`synthetic_lowrank`).

    Attributes:
      x: Observed currents ``A z_t + a + u_t + noise`` ``[T, N]`` (``a = 0`` for the
        ridge teacher).
      u: Small external input ``[T, N]``.
      z: True latents ``[T, K]``.
      A: Teacher read-out ``[N, K]``.
      B: Teacher read-in ``[K, N]`` (ridge or AdamW fit of
        ``z_t ~ B tanh(A z_{t-1} + a + u_{t-1}) + b``).
      a: Teacher read-out bias ``[N]`` (zero for the ridge teacher).
      b: Teacher read-in bias ``[K]`` (zero for the ridge teacher).
    """

    x: Float[Array, "t n"]
    u: Float[Array, "t n"]
    z: Float[Array, "t k"]
    A: Float[Array, "n k"]
    B: Float[Array, "k n"]
    a: Float[Array, " n"]
    b: Float[Array, " k"]


def _synth(z, key, input_std, noise_std, ridge, n_neurons, teacher_steps, teacher_lr):
    t, k = z.shape
    ka, ku, kn = jax.random.split(key, 3)
    u = input_std * jax.random.normal(ku, (t, n_neurons), z.dtype)
    if teacher_steps:
        A, a, B, b = _gradient_teacher(z, u, ka, n_neurons, teacher_steps, teacher_lr)
    else:
        A = jax.random.normal(ka, (n_neurons, k), z.dtype) / jnp.sqrt(jnp.asarray(k, z.dtype))
        a, b = jnp.zeros((n_neurons,), z.dtype), jnp.zeros((k,), z.dtype)
        phi = jnp.tanh(z[:-1] @ A.T + u[:-1])  # [T-1, N]
        gram = phi.T @ phi + ridge * jnp.eye(n_neurons, dtype=z.dtype)
        B = jnp.linalg.solve(gram, phi.T @ z[1:]).T  # [K, N]
    x = z @ A.T + a[None] + u + noise_std * jax.random.normal(kn, (t, n_neurons), z.dtype)
    return SyntheticRNN(x, u, z, A, B, a, b)


def _gradient_teacher(z, u, key, n, steps, lr):
    """The authors' teacher: ``z_{t+1} ~ B (tanh(A z_t + a) + u_t) + b`` fitted by AdamW.

    Full batch, mean squared error, PyTorch ``nn.Linear`` initialisation (uniform
    ``+-1/sqrt(fan_in)``), AdamW with weight decay 1e-2, ``steps`` scanned steps.
    """
    k = z.shape[1]
    keys = jax.random.split(key, 4)
    shapes = ((n, k), (n,), (k, n), (k,))
    fan = (k, k, n, n)
    p = tuple(
        jax.random.uniform(kk, sh, z.dtype, -1.0, 1.0) / jnp.sqrt(jnp.asarray(f, z.dtype))
        for kk, sh, f in zip(keys, shapes, fan, strict=True)
    )

    def loss(p):
        A, a, B, b = p
        h = jnp.tanh(z[:-1] @ A.T + a[None]) + u[:-1]
        return jnp.mean((h @ B.T + b[None] - z[1:]) ** 2)

    opt = optax.adamw(lr, weight_decay=1e-2)

    def step(c, _):
        p, s = c
        return optax_update(opt, jax.grad(loss)(p), s, p), None

    (p, _), _ = jax.lax.scan(step, (p, opt.init(p)), None, length=steps)
    return p


_synth_jit = jax.jit(_synth, static_argnames=("n_neurons", "teacher_steps"))


def synthetic_lowrank(
    z: Float[ArrayLike, "t k"],
    *,
    key: KeyArray,
    n_neurons: int = 20,
    input_std: RealScalarLike = 5e-3,
    noise_std: RealScalarLike = 0.1,
    ridge: RealScalarLike = 1e-3,
    teacher_steps: int = 0,
    teacher_lr: RealScalarLike = 1e-3,
) -> SyntheticRNN:
    """A teacher lrRNN whose latents are ``z``, and its activity.

    Draws an input ``u ~ N(0, input_std^2)`` and fits a teacher. ``teacher_steps = 0``
    (default): ``A ~ N(0, 1/K)`` is drawn and the read-in ``B`` fitted in closed form by
    ridge regression so that ``z_t ~= B tanh(A z_{t-1} + u_{t-1})``, read-out bias
    ``a = 0``. ``teacher_steps > 0``: the authors' teacher (their ``data_generator``):
    ``A, a, B, b`` fitted jointly by full-batch AdamW (``teacher_lr``, weight decay 1e-2,
    PyTorch's linear-layer initialisation) on the mean squared error of
    ``z_t ~= B (tanh(A z_{t-1} + a) + u_{t-1}) + b``; the authors run 10^4 steps. The
    two teachers give different data: the fitted ``A`` comes out nearly block-sparse
    (most neurons read one latent group only), the drawn one mixes the groups in every
    neuron. Returns ``x_t = A z_t + a + u_t + noise_std eps``. The teacher's sub-circuits
    ``A_g B_g`` are the ground truth for :func:`sub_connectivity_r2`. Jitted
    (``n_neurons`` and ``teacher_steps`` static).

    How much of ``J = A B`` the observations identify: a model reading ``tanh(x_{t-1})``
    sees ``J`` only through the regression of ``x_t`` on ``tanh(x_{t-1})``; the
    components of ``J`` along directions of ``tanh(A z)`` whose variance is below the
    noise's are attenuated for every estimator (the least-squares regression on 1000
    noisy samples reaches connectivity R^2 0.67 / 0.38 for the ridge teacher at
    ``dt = 0.02``, seeds 0 / 1; for the fitted teacher at ``dt = 0.1`` it reaches
    0.87 / 0.90 / 0.57 on seeds 0 / 1 / 2 (with intercept, the 1000 even-step pairs; its
    ``J`` has 0.85 / 0.88 / 1.17 of the teacher's norm), 0.82 on the authors' own data).

    Args:
      z: Latent trajectory ``[T, K]`` (e.g. :func:`lorenz_thomas`).
      key: PRNG key.
      n_neurons: ``N``.
      input_std: Input standard deviation ``>= 0``.
      noise_std: Observation noise standard deviation ``>= 0``.
      ridge: Ridge penalty ``> 0`` (the drawn-``A`` teacher).
      teacher_steps: ``0`` for the ridge teacher, else AdamW steps of the fitted teacher.
      teacher_lr: Learning rate of the fitted teacher ``> 0`` (traced).

    Returns:
      :class:`SyntheticRNN`.

    Raises:
      TypeError: If ``z`` is not a floating matrix.
      ValueError: If ``T < 2``, ``n_neurons < 1`` or a scale is out of range.

    Example:
      >>> import jax
      >>> d = synthetic_lowrank(lorenz_thomas(40, substeps=2), key=jax.random.key(0))
      >>> d.x.shape, d.B.shape
      ((40, 20), (6, 20))
    """
    _validate.floating(z, name="z")
    _validate.ndim(z, 2, name="z")
    if jnp.shape(z)[0] < 2:
        raise ValueError(f"`z` must hold T >= 2 time steps, got shape {jnp.shape(z)}.")
    _validate.is_key(key)
    n = _validate.python_int(n_neurons, name="n_neurons", minimum=1)
    teacher_steps = _validate.python_int(teacher_steps, name="teacher_steps", minimum=0)
    z = jnp.asarray(z)
    z = _validate.guard_positive(z, teacher_lr, name="teacher_lr")
    z = _validate.guard_non_negative(z, input_std, name="input_std")
    z = _validate.guard_non_negative(z, noise_std, name="noise_std")
    z = _validate.guard_positive(z, ridge, name="ridge")
    dt = z.dtype
    hp = (jnp.asarray(v, dt) for v in (input_std, noise_std, ridge))
    lr = jnp.asarray(teacher_lr, dt)
    return _synth_jit(z, key, *hp, n, teacher_steps, lr)
