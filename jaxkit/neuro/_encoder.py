"""FacRNN's amortised GRU encoders (the read-in of the reconstructed spike-count path [R]).

The released code reads ``z_t`` linearly from ``tanh(x_{t-1})``. For spike counts the
previous bin is a poor summary of the state, so the spec's Poisson path amortises the
posterior with a GRU (LFADS-style). Here the GRU runs causally over a window of the last
``W`` bins (oldest first), so each training pair stays independent and minibatches keep
FacRNN's importance-weighted PC estimator: ``h_w = GRU(h_{w-1}, x_{t-W+w})``, ``h_0 = 0``,
``mu_t = W_out h_W + b_out``. The posterior width stays FacRNN's fixed ``sigma_q``.

:class:`BiGRUEncoder` is the spec's LFADS-style encoder: a forward and a backward GRU over
the whole sequence, ``q(z_t | y_{1:T})`` with ``mu_t = W_out [h^f_t ; h^b_t] + b_out``,
``h^f_t = GRU_f(h^f_{t-1}, y_t)``, ``h^b_t = GRU_b(h^b_{t+1}, y_t)`` (both start at 0).
"""

import equinox as eqx
import jax
import jax.numpy as jnp
from jaxtyping import Array, ArrayLike, Float

from jaxkit import _validate
from jaxkit._typing import KeyArray


class GRUEncoder(eqx.Module):
    """A GRU over a causal window of activity, read out linearly to the latent mean.

    Attributes:
      cell: The GRU cell (``eqx.nn.GRUCell``; PyTorch's gate convention).
      out: Linear map from the last hidden state to the ``K`` latent means.
    """

    cell: eqx.nn.GRUCell
    out: eqx.nn.Linear

    def __init__(self, n_neurons: int, rank: int, *, hidden: int = 32, key: KeyArray, dtype):
        """Initialise the cell and the read-out (equinox's default uniform init).

        Args:
          n_neurons: Input size ``N``.
          rank: Output size ``K``.
          hidden: Hidden units.
          key: PRNG key.
          dtype: Parameter dtype.
        """
        n_neurons, rank, hidden = _sizes(n_neurons, rank, hidden)
        _validate.is_key(key)
        kc, ko = jax.random.split(key)
        self.cell = eqx.nn.GRUCell(n_neurons, hidden, dtype=dtype, key=kc)
        self.out = eqx.nn.Linear(hidden, rank, dtype=dtype, key=ko)

    @property
    def hidden(self) -> int:
        """The number of hidden units."""
        return self.cell.hidden_size

    def __call__(self, windows: Float[Array, "*batch w n"]) -> Float[Array, "*batch k"]:
        """Latent means from windows ``[..., W, N]`` (oldest bin first, last = ``t - 1``).

        ``windows`` may carry leading batch axes (mapped over).

        Raises:
          TypeError: ``windows`` not a floating array of rank >= 2 with last axis ``N``.
        """
        _check_seqs(windows, self.cell.input_size, name="windows", axes="[..., W, N]")
        return _map_lead(lambda xs: self.out(_states(self.cell, xs)[-1]), windows)


class BiGRUEncoder(eqx.Module):
    """A bidirectional GRU over whole sequences, read out linearly to the latent means.

    Attributes:
      fwd: The forward GRU cell (``eqx.nn.GRUCell``; PyTorch's gate convention).
      bwd: The backward GRU cell.
      out: Linear map from the concatenated ``[h^f_t ; h^b_t]`` to the ``K`` latent means.
    """

    fwd: eqx.nn.GRUCell
    bwd: eqx.nn.GRUCell
    out: eqx.nn.Linear

    def __init__(self, n_neurons: int, rank: int, *, hidden: int = 32, key: KeyArray, dtype):
        """Both cells and the read-out; arguments as :class:`GRUEncoder`'s, per direction."""
        n_neurons, rank, hidden = _sizes(n_neurons, rank, hidden)
        _validate.is_key(key)
        kf, kb, ko = jax.random.split(key, 3)
        self.fwd = eqx.nn.GRUCell(n_neurons, hidden, dtype=dtype, key=kf)
        self.bwd = eqx.nn.GRUCell(n_neurons, hidden, dtype=dtype, key=kb)
        self.out = eqx.nn.Linear(2 * hidden, rank, dtype=dtype, key=ko)

    @property
    def hidden(self) -> int:
        """The number of hidden units per direction."""
        return self.fwd.hidden_size

    def __call__(self, seqs: Float[Array, "*batch t n"]) -> Float[Array, "*batch t k"]:
        """Latent means ``[..., T, K]`` of every step of sequences ``[..., T, N]``.

        ``seqs`` may carry leading batch axes (mapped over).

        Raises:
          TypeError: ``seqs`` not a floating array of rank >= 2 with last axis ``N``.
        """
        _check_seqs(seqs, self.fwd.input_size, name="seqs", axes="[..., T, N]")

        def one(xs):
            h = [_states(self.fwd, xs), _states(self.bwd, xs, reverse=True)]
            return jax.vmap(self.out)(jnp.concatenate(h, -1))

        return _map_lead(one, seqs)


def _sizes(n_neurons, rank, hidden):
    """The encoders' static sizes, each a Python int >= 1 (TypeError / ValueError naming it)."""
    return (
        _validate.python_int(n_neurons, name="n_neurons", minimum=1),
        _validate.python_int(rank, name="rank", minimum=1),
        _validate.python_int(hidden, name="hidden", minimum=1),
    )


def _check_seqs(x, n, *, name, axes):
    """``x [..., T, N]`` floating with ``N = n`` (dtype and shape only: tracers pass)."""
    _validate.floating(x, name=name)  # before any jnp op: a str names the argument
    _validate.min_ndim(x, 2, name=name)
    if jnp.shape(x)[-1] != n:
        raise TypeError(f"`{name}` must have shape {axes} with N = {n}, got shape {jnp.shape(x)}.")


def _states(cell, xs, *, reverse=False):
    """Every hidden state of ``cell`` run over ``xs`` ``[T, N]`` from a zero state."""

    def step(h, x):
        h = cell(x, h)
        return h, h

    return jax.lax.scan(step, jnp.zeros((cell.hidden_size,), xs.dtype), xs, reverse=reverse)[1]


def _map_lead(fn, x):
    """``fn`` over the ``[T, N]`` slices of ``x`` ``[..., T, N]``, leading axes restored."""
    out = jax.vmap(fn)(x.reshape((-1,) + x.shape[-2:]))
    return out.reshape(x.shape[:-2] + out.shape[1:])


def _windows(x, window):
    t = x.shape[0]
    pad = jnp.concatenate([jnp.zeros((window - 1,) + x.shape[1:], x.dtype), x], 0)
    idx = jnp.arange(t)[:, None] + jnp.arange(window)[None, :]
    return pad[idx]


_windows_jit = jax.jit(_windows, static_argnames=("window",))


def lagged_windows(x: Float[ArrayLike, "t n"], *, window: int) -> Float[Array, "t w n"]:
    """Causal windows ``out[t] = x[t - W + 1 : t + 1]`` (zeros before the start). Jitted.

    The GRU encoder's read-in: pair ``t`` (observation ``x_{t+1}``) reads ``out[t]``,
    whose last row is ``x_t``.

    Args:
      x: Activity ``[T, N]`` (time first).
      window: Window length ``W >= 1``.

    Returns:
      ``[T, W, N]``.

    Raises:
      TypeError: If ``x`` is not a floating ``[T, N]`` array or ``window`` not an int.
      ValueError: If ``window < 1``.

    Example:
      >>> import jax.numpy as jnp
      >>> lagged_windows(jnp.arange(3.0)[:, None], window=2)[:, :, 0].tolist()
      [[0.0, 0.0], [0.0, 1.0], [1.0, 2.0]]
    """
    _validate.floating(x, name="x")
    _validate.ndim(x, 2, name="x")
    w = _validate.python_int(window, name="window", minimum=1)
    return _windows_jit(jnp.asarray(x), w)
