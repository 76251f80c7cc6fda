"""The conformance suite: checks every registered public function must pass.

Each area registers its cases in ``tests/<area>/cases.py`` as a module-level
``CASES`` list of :class:`Case`; :func:`registry` collects them all. The checks
are plain functions raising ``AssertionError`` (so the suite's own test can run
them on deliberately broken functions and see them fail):

1. jit equals eager;            2. ``eval_shape`` agrees with the real output;
3. vmap equals a Python loop;   4. f32 and bf16 are preserved;
5. traced once across two values of every continuous hyperparameter, and a NaN value of
   each raises an error naming it (under ``jit``: ``eqx.error_if``, as NaN compares False);
6. ``check_grads`` in x64 in the supported modes;
7. output sharding preserved on an 8-device mesh (leading axis on ``data``);
8. bad inputs raise the declared error type whose message names the argument, and a
   string for any hyperparameter raises a ``TypeError`` naming it;
9. eager calls hit the compile cache: 30 eager calls with the same inputs compile
   nothing after the first (counted with ``jax.monitoring``'s backend-compile event).
"""

import contextlib
import dataclasses
import functools
import importlib
import pathlib
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import jaxtyping
import numpy as np
from jax import monitoring
from jax.test_util import check_grads

BUILT: list[Callable[[], Any]] = []  # every built_once builder, for their own test


def built_once(build: Callable[[], Any]) -> Callable[[], Any]:
    """Cache a case's model (or table) builder: built once per worker, on first use.

    The build runs concretely (``ensure_compile_time_eval``: never traced into the check that
    first asks for it) and with JAX's 32-bit defaults (``enable_x64(False)``): the x64 grads
    check may be the first to ask, and a model cached there in float64 would then be fed to
    every later float32 check of that worker (a float64 state under jit is a dtype warning,
    i.e. an error here; which check comes first depends on xdist's scheduling).
    """

    @functools.cache
    @functools.wraps(build)
    def once() -> Any:
        with jax.ensure_compile_time_eval(), jax.enable_x64(False):
            return build()

    BUILT.append(once)
    return once


TOL = {jnp.dtype(jnp.float32): 1e-5, jnp.dtype(jnp.bfloat16): 2e-2, jnp.dtype(jnp.float64): 1e-10}


@dataclasses.dataclass(frozen=True)
class Bad:
    """A bad input: ``make(key) -> (args, kwargs)`` must raise ``error`` matching ``match``."""

    what: str
    make: Callable[[jax.Array], tuple[tuple, dict]]
    error: type[BaseException]
    match: str | None = None


@dataclasses.dataclass(frozen=True)
class Case:
    """One registered function.

    Attributes:
      name: test id, e.g. ``"soft.sort/pav"``.
      fn: ``fn(*args, **hparams, **static)``.
      make_args: ``(key, dtype) -> args``; array args of ``dtype`` whose leading axis
        is a batch of 8 (for the sharding check) unless ``shard_argnums=()``.
      hparams: continuous hyperparameters, name -> two distinct values; they are
        passed as traced arguments.
      static: static keyword arguments (method choices, sizes).
      grad_modes: autodiff modes that ``check_grads`` checks (``()``: none).
      grad_order: order for ``check_grads``.
      grad_argnums: positions of the args differentiated.
      dtypes: floating dtypes whose preservation is checked.
      vmap: whether to check ``vmap`` against a loop (over axis 0 of every array arg).
      shard_argnums: array args placed sharded along axis 0 for the sharding check.
      bad: bad inputs and their errors.
      rtol: comparison tolerance for f32 (jit/eager, vmap/loop).
      grad_eps, grad_atol, grad_rtol: ``check_grads`` settings.
      slow_checks: names of checks (keys of :data:`CHECKS`, or ``"sharding"``) that run
        only in ``make test-slow`` for this case (the default run keeps the rest).
      nan_names: per hyperparameter, the name its NaN error must give where that is not the
        hyperparameter's own (a case's wrapper feeding a library argument of another name),
        or ``None`` for an entry of ``hparams`` that is a model parameter, not a
        hyperparameter (NaN in, NaN out, as in any layer): exempt from the NaN check.
      converted: hyperparameters the case's wrapper converts before the library sees them
        (``jnp.asarray(v, dtype)`` parses a string): exempt from the string check of
        ``bad_inputs``.
    """

    name: str
    fn: Callable[..., Any]
    make_args: Callable[[jax.Array, Any], tuple]
    hparams: dict[str, tuple[Any, Any]] = dataclasses.field(default_factory=dict)
    static: dict[str, Any] = dataclasses.field(default_factory=dict)
    grad_modes: tuple[str, ...] = ("fwd", "rev")
    grad_order: int = 1
    grad_argnums: tuple[int, ...] = (0,)
    dtypes: tuple[Any, ...] = (jnp.float32, jnp.bfloat16)
    vmap: bool = True
    shard_argnums: tuple[int, ...] = (0,)
    bad: tuple[Bad, ...] = ()
    rtol: float = 1e-5
    grad_eps: float | None = None
    grad_atol: float | None = None
    grad_rtol: float | None = None
    slow_checks: tuple[str, ...] = ()
    nan_names: dict[str, str | None] = dataclasses.field(default_factory=dict)
    converted: tuple[str, ...] = ()

    def call(self, args: Sequence[Any], hp: dict[str, Any] | None = None) -> Any:
        hp = {k: v[0] for k, v in self.hparams.items()} if hp is None else hp
        return self.fn(*args, **hp, **self.static)


def registry() -> list[Case]:
    """Collect ``CASES`` from every ``tests/<area>/cases.py``."""
    here = pathlib.Path(__file__).parent
    cases: list[Case] = []
    for path in sorted(here.glob("*/cases.py")):
        mod = importlib.import_module(f"tests.{path.parent.name}.cases")
        cases.extend(mod.CASES)
    names = [c.name for c in cases]
    dupes = {n for n in names if names.count(n) > 1}
    assert not dupes, f"duplicate conformance case names: {sorted(dupes)}"
    return cases


# ----------------------------------------------------------------------------- checks


def _close(a: Any, b: Any, rtol: float, what: str) -> None:
    la, lb = jax.tree.leaves(a), jax.tree.leaves(b)
    assert jax.tree.structure(a) == jax.tree.structure(b), f"{what}: tree structures differ"
    for x, y in zip(la, lb, strict=True):
        x, y = np.asarray(x), np.asarray(y)
        assert x.shape == y.shape, f"{what}: shapes {x.shape} vs {y.shape}"
        if np.issubdtype(x.dtype, np.inexact) or x.dtype.name == "bfloat16":
            np.testing.assert_allclose(
                x.astype(np.float64), y.astype(np.float64), rtol=rtol, atol=rtol, err_msg=what
            )
        else:
            np.testing.assert_array_equal(x, y, err_msg=what)


def check_eval_shape(case: Case, key: jax.Array) -> None:
    args = case.make_args(key, jnp.float32)
    abstract = jax.tree.map(lambda a: jax.ShapeDtypeStruct(jnp.shape(a), jnp.result_type(a)), args)
    shapes = jax.eval_shape(lambda *a: case.call(a), *abstract)
    real = case.call(args)
    got = jax.tree.map(lambda s: (s.shape, s.dtype), shapes)
    want = jax.tree.map(lambda r: (jnp.shape(r), jnp.result_type(r)), real)
    assert got == want, f"{case.name}: eval_shape {got} != real {want}"


def check_vmap(case: Case, key: jax.Array) -> None:
    if not case.vmap:
        return
    keys = jax.random.split(key, 3)
    rows = [case.make_args(k, jnp.float32) for k in keys]
    stacked = jax.tree.map(lambda *xs: jnp.stack(xs), *rows)
    batched = jax.vmap(lambda *a: case.call(a))(*stacked)
    looped = jax.tree.map(lambda *xs: jnp.stack(xs), *[case.call(r) for r in rows])
    _close(batched, looped, case.rtol, f"{case.name}: vmap != loop")


def check_dtypes(case: Case, key: jax.Array) -> None:
    for dt in case.dtypes:
        args = case.make_args(key, dt)
        out = case.call(args)
        for leaf in jax.tree.leaves(out):
            if jnp.issubdtype(jnp.result_type(leaf), jnp.floating):
                assert jnp.result_type(leaf) == jnp.dtype(dt), (
                    f"{case.name}: input {jnp.dtype(dt)} gave output {jnp.result_type(leaf)}"
                )


def check_jit(case: Case, key: jax.Array) -> None:
    """Under ``jit`` the result equals the eager call's, two calls with different
    hyperparameter values trace (and compile) once, and a NaN value of each hyperparameter
    raises an error naming it: one compiled program serves the three checks."""
    traces: list[None] = []

    def f(a, h):
        traces.append(None)
        return case.call(a, h)

    jf = jax.jit(f)
    first = case.make_args(jax.random.fold_in(key, 0), jnp.float32)
    for i in range(2):
        args = case.make_args(jax.random.fold_in(key, i), jnp.float32) if i else first
        hp = {k: jnp.asarray(v[i], jnp.float32) for k, v in case.hparams.items()}
        # eager first: a case may build (and cache) its module lazily on the first call
        eager = case.call(args, {k: v[0] for k, v in case.hparams.items()}) if i == 0 else None
        out = jax.block_until_ready(jf(args, hp))
        if i == 0:
            _close(out, eager, case.rtol, f"{case.name}: jit != eager")
    assert len(traces) == 1, f"{case.name}: traced {len(traces)} times for 2 calls"
    for name in case.hparams:
        _check_nan_raises(case, jf, first, name)


def _check_nan_raises(case: Case, jf: Callable[..., Any], args: Any, name: str) -> None:
    """``jf(args, hp)`` with ``hp[name]`` NaN raises an error naming it (``case.nan_names``)."""
    want = case.nan_names.get(name, name)
    if want is None:
        return
    hp = {k: jnp.asarray(v[0], jnp.float32) for k, v in case.hparams.items()}
    hp[name] = jnp.asarray(jnp.nan, jnp.float32)
    try:
        jax.block_until_ready(jf(args, hp))
    except Exception as e:  # noqa: BLE001 (under jit an eqx.error_if is a runtime error)
        assert f"`{want}`" in str(e), (
            f"{case.name}: {name}=NaN under jit raised {type(e).__name__} without naming "
            f"`{want}`: {str(e)[:300]}"
        )
    else:
        raise AssertionError(
            f"{case.name}: {name}=NaN under jit raised nothing; guard the traced value "
            "(`jaxkit._validate.guard_*` / `eqx.error_if`; NaN compares False)"
        )


def check_grads_x64(case: Case, key: jax.Array) -> None:
    if not case.grad_modes:
        return
    with jax.enable_x64(True):
        args = case.make_args(key, jnp.float64)
        hp = {k: jnp.asarray(v[0], jnp.float64) for k, v in case.hparams.items()}
        diff = tuple(args[i] for i in case.grad_argnums)

        def f(*d):
            full = list(args)
            for i, v in zip(case.grad_argnums, d, strict=True):
                full[i] = v
            return case.call(full, hp)

        kw = {
            k: v
            for k, v in (("eps", case.grad_eps), ("atol", case.grad_atol), ("rtol", case.grad_rtol))
            if v is not None
        }
        # jitted: check_grads' evaluations, jvp and vjp each compile once as a whole
        # instead of op by op (eager x64 ops each compile alone); the derivatives are f's
        check_grads(jax.jit(f), diff, order=case.grad_order, modes=case.grad_modes, **kw)


def check_sharding(case: Case, key: jax.Array, mesh: jax.sharding.Mesh) -> None:
    if not case.shard_argnums:
        return
    args = list(case.make_args(key, jnp.float32))
    n = mesh.shape["data"]
    for i in case.shard_argnums:
        a = jnp.asarray(args[i])
        assert a.shape[0] % n == 0, f"{case.name}: arg {i} leading axis must divide {n}"
        args[i] = jax.device_put(
            a, jax.NamedSharding(mesh, jax.P("data", *([None] * (a.ndim - 1))))
        )
    batch = jnp.shape(args[case.shard_argnums[0]])[0]
    with jax.set_mesh(mesh):
        out = jax.jit(lambda a: case.call(a))(tuple(args))
    for leaf in jax.tree.leaves(out):
        if jnp.ndim(leaf) >= 1 and leaf.shape[0] == batch:
            spec = leaf.sharding.spec
            assert len(spec) >= 1 and spec[0] in ("data", ("data",)), (
                f"{case.name}: output of shape {leaf.shape} has sharding spec {spec}, "
                "expected its leading axis on 'data'"
            )


def check_bad_inputs(case: Case, key: jax.Array) -> None:
    """Each of ``case.bad`` raises its error naming the argument, and so does a string passed
    for any hyperparameter (``softness="0.1"``: a ``TypeError`` naming it, not JAX's; the
    tests' jaxtyping hook off, as users run without it: it would name the argument first
    and hide whether the library does)."""
    for bad in case.bad:
        _expect_error(case, bad, key)
    with without_jaxtyping():
        for bad in _string_hparams(case):
            _expect_error(case, bad, key)


def _expect_error(case: Case, bad: Bad, key: jax.Array) -> None:
    args, kwargs = bad.make(key)
    kw = {**{k: v[0] for k, v in case.hparams.items()}, **case.static, **kwargs}
    try:
        jax.block_until_ready(case.fn(*args, **kw))
    except bad.error as e:
        if bad.match is not None:
            assert bad.match in str(e), (
                f"{case.name}: bad input '{bad.what}' raised {type(e).__name__} "
                f"without naming `{bad.match}`: {e}"
            )
    except Exception as e:  # noqa: BLE001
        raise AssertionError(
            f"{case.name}: bad input '{bad.what}' raised {type(e).__name__}, expected "
            f"{bad.error.__name__}: {e}"
        ) from e
    else:
        raise AssertionError(f"{case.name}: bad input '{bad.what}' raised nothing")


def _string_hparams(case: Case) -> list[Bad]:
    """A string ``"0.1"`` for each hyperparameter the library sees as passed (not one a
    case's wrapper converts first, nor a model parameter): a ``TypeError`` naming it."""
    return [
        Bad(
            f"{name}='0.1'",
            lambda k, name=name: (case.make_args(k, jnp.float32), {name: "0.1"}),
            TypeError,
            f"`{case.nan_names.get(name, name)}`",
        )
        for name in case.hparams
        if case.nan_names.get(name, name) is not None and name not in case.converted
    ]


@contextlib.contextmanager
def without_jaxtyping() -> Iterator[None]:
    """The tests' jaxtyping hook off inside (``jaxtyping.config``, read at each call)."""
    old = jaxtyping.config.jaxtyping_disable
    jaxtyping.config.update("jaxtyping_disable", True)
    try:
        yield
    finally:
        jaxtyping.config.update("jaxtyping_disable", old)


_COMPILES = [0]


def _on_duration(event: str, duration: float, **_: Any) -> None:
    if event == "/jax/core/compile/backend_compile_duration":
        _COMPILES[0] += 1


monitoring.register_event_duration_secs_listener(_on_duration)

EAGER_CALLS = 30


def compile_count() -> int:
    """Backend compilations seen so far in this process."""
    return _COMPILES[0]


def check_eager_cache(case: Case, key: jax.Array) -> None:
    """30 eager calls with the same inputs: no compilation after the first call."""
    args = case.make_args(key, jnp.float32)
    jax.block_until_ready(case.call(args))
    before = compile_count()
    for i in range(EAGER_CALLS - 1):
        jax.block_until_ready(case.call(args))
        grown = compile_count() - before
        assert grown == 0, (
            f"{case.name}: eager call {i + 2} of {EAGER_CALLS} compiled {grown} new "
            "function(s); wrap the public function (or its core) in a module-level "
            "jax.jit with static choices static, or keep loop bodies at module level"
        )


def check_empty_batch(case: Case, key: jax.Array) -> None:
    """The sharded arguments cut to 0 rows: a ``TypeError``/``ValueError`` naming an argument,
    or a result without NaN (a mean over no row is NaN; NumPy's "zero-size array" error and
    a reshape's ``ZeroDivisionError`` name nothing). Slow tier only (new shapes compile)."""
    args = list(case.make_args(key, jnp.float32))
    arrays = (jax.Array, np.ndarray)
    cut = [i for i in case.shard_argnums if isinstance(args[i], arrays) and args[i].ndim >= 1]
    if not cut:
        return
    for i in cut:
        args[i] = args[i][:0]
    try:
        with without_jaxtyping():
            out = jax.block_until_ready(case.call(args))
    except (TypeError, ValueError) as e:
        assert "`" in str(e), f"{case.name}: an empty batch raised an unnamed error: {e}"
        return
    except Exception as e:  # noqa: BLE001
        raise AssertionError(
            f"{case.name}: an empty batch raised {type(e).__name__}: {e}; raise a TypeError "
            "naming the argument (_validate.nonempty) or return an empty result"
        ) from e
    for leaf in jax.tree.leaves(out):
        if hasattr(leaf, "dtype") and jnp.issubdtype(leaf.dtype, jnp.inexact):
            assert not np.any(np.isnan(np.asarray(leaf))), (
                f"{case.name}: an empty batch returned NaN (a mean over no row?); raise a "
                "TypeError naming the argument (_validate.nonempty)"
            )


SLOW_TIER = {"empty_batch", "vmap", "dtypes", "grads"}
"""Checks that run only in ``make test-slow`` for every case: each compiles programs no other
check shares (new shapes, a vmapped program, other dtypes, x64 derivatives), about 41 s of the
default run's summed test time in wave 48 and the 32 default ``grads`` checks another 31 s in
wave 49 (``make test`` keeps jit, eval_shape, sharding where a case runs it by default, bad
inputs and the eager cache)."""

VARIANT_DEFAULT_CHECKS = {"bad_inputs"}
"""What ``make test`` runs of a *variant* case (``family/variant``, a family's cases after its
first in registration order): its bad inputs only; every other check of a variant runs in
``make test-slow`` (wave 49: one case per family by default, ~24 s of summed test time)."""

ALL_BUT_BAD_INPUTS = (
    "vmap",
    "sharding",
    "eval_shape",
    "jit",
    "traced_once",
    "dtypes",
    "eager_cache",
)
"""``slow_checks`` leaving ``make test`` only the bad inputs (a generator whose programs the
area's own tests compile: the checks of its jit, vmap and sharding run in the slow tier)."""


def steered_case(
    name: str,
    fn: Callable[..., Any],
    make_args: Callable[..., Any],
    *,
    wide_edit: Callable[[jax.Array], Any],
    layer: int,
    hparams: dict[str, tuple[float, float]],
    shard_argnums: tuple[int, ...],
) -> Case:
    """A generator's ``interventions=`` case (``svgt_generate``, ``dlmr_generate``,
    ``diffusion.sample``: one shape). The oracles are the area's own tests; here jit, vmap
    and the batch-sharded ``[B, D]`` edit run in ``make test-slow``, and ``make test`` runs
    the bad input: ``wide_edit(key) -> (args, kwargs)``, a call with an edit at ``layer``
    one wider than ``d_model`` (a ``TypeError`` naming ``interventions.add[layer]``)."""
    return Case(
        name=name,
        slow_checks=ALL_BUT_BAD_INPUTS,
        fn=fn,
        make_args=make_args,
        hparams=hparams,
        grad_modes=(),
        dtypes=(jnp.float32,),
        shard_argnums=shard_argnums,
        bad=(
            Bad(
                "an edit one wider than d_model",
                wide_edit,
                TypeError,
                f"interventions.add[{layer}]",
            ),
        ),
    )


ALIASES = {"traced_once": "jit"}
"""Former check names, still accepted in ``slow_checks``: ``jit`` now also checks that two
hyperparameter values trace once (it was a separate check compiling the same function again)."""


def family_leads(cases: Sequence[Case]) -> set[str]:
    """The name of each family's first registered case (a family: the names before ``/``;
    a function with one case leads its own family)."""
    leads: dict[str, str] = {}
    for case in cases:
        leads.setdefault(case.name.split("/")[0], case.name)
    return set(leads.values())


def is_slow(case: Case, check: str, *, lead: bool = True) -> bool:
    """Whether ``check`` runs only in the slow tier for ``case``: a check of
    :data:`SLOW_TIER`, any check but :data:`VARIANT_DEFAULT_CHECKS` of a case that does not
    lead its family (``lead=False``), or one listed in ``slow_checks`` (a merged check only
    when every name it merges is listed)."""
    return (
        check in SLOW_TIER
        or (not lead and check not in VARIANT_DEFAULT_CHECKS)
        or (
            check in case.slow_checks
            and all(old in case.slow_checks for old, new in ALIASES.items() if new == check)
        )
    )


CHECKS = {
    "eager_cache": check_eager_cache,
    "jit": check_jit,
    "eval_shape": check_eval_shape,
    "vmap": check_vmap,
    "dtypes": check_dtypes,
    "grads": check_grads_x64,
    "bad_inputs": check_bad_inputs,
    "empty_batch": check_empty_batch,
}
