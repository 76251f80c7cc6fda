import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxkit import _validate, sharding
from jaxkit.kernels import _dispatch


def test_positive_names_argument():
    with pytest.raises(ValueError, match="`softness` must be > 0"):
        _validate.positive(softness=0.0)
    _validate.positive(softness=0.5)
    _validate.positive(softness=jnp.float32(1.0))


def test_checks_skip_tracers():
    # the concrete check cannot see a tracer: the value passes through unchanged
    out = jax.jit(lambda s: (_validate.positive(softness=s), s)[1])(jnp.float32(-1.0))
    assert float(out) == -1.0


@pytest.mark.parametrize("bad", [0.0, -1.0, float("nan"), float("inf")])
def test_guard_positive_eager_and_traced(bad):
    x = jnp.ones(3)
    with pytest.raises(ValueError, match="`softness` must be finite and > 0"):
        _validate.guard_positive(x, bad, name="softness")
    f = jax.jit(lambda x, s: _validate.guard_positive(x, s, name="softness") * s)
    np.testing.assert_allclose(f(x, 0.5), 0.5)
    with pytest.raises(Exception, match="`softness` must be finite and > 0"):
        jax.block_until_ready(f(x, bad))


def test_guard_interval_and_non_negative_catch_nan():
    x = jnp.ones(2)
    f = jax.jit(lambda x, q: _validate.guard_interval(x, q, name="q", low=0.0, high=1.0))
    np.testing.assert_allclose(f(x, 1.0), 1.0)
    for bad in (-0.5, 1.5, float("nan")):
        with pytest.raises(Exception, match=r"`q` must lie in \[0.0, 1.0\]"):
            jax.block_until_ready(f(x, bad))
    g = jax.jit(lambda x, c: _validate.guard_non_negative(x, c, name="c", allow_inf=True))
    np.testing.assert_allclose(g(x, jnp.inf), 1.0)
    with pytest.raises(Exception, match="`c` must be >= 0"):
        jax.block_until_ready(g(x, jnp.nan))


def test_python_int_and_real():
    assert _validate.python_int(np.int64(3), name="n", minimum=1) == 3
    for bad in (True, 2.0, "3", None):
        with pytest.raises(TypeError, match="`n` must be a Python int"):
            _validate.python_int(bad, name="n")
    with pytest.raises(ValueError, match="`n` must be >= 1, got n=0"):
        _validate.python_int(0, name="n", minimum=1)
    for bad in ("0.1", None, True, [0.1, "a"], {"a": 1}):
        with pytest.raises(TypeError, match="`softness` must be a real number"):
            _validate.real(bad, name="softness")
        with pytest.raises(TypeError, match="`softness` must be a real number"):
            _validate.real_array(bad, name="softness")
        with pytest.raises(TypeError, match="`softness` must be a real number"):
            _validate.finite_scalar(softness=bad)
    assert _validate.real_array(2, name="n", dtype=jnp.float32).dtype == jnp.float32


def test_numerics_helpers():
    from jaxkit import _numerics, _typing

    assert _typing.accumulation_dtype(jnp.bfloat16) == jnp.float32
    assert _typing.accumulation_dtype(jnp.float32) == jnp.float32
    assert _typing.accumulation_dtype(np.float64) == jnp.float64
    rng = np.random.default_rng(0)
    for n in (5, 40000):  # packed int32 sort, and the key-value sort above 2**15
        perm = np.stack([rng.permutation(n) for _ in range(3)])
        inv = np.asarray(_numerics.inverse_permutation(jnp.asarray(perm)))
        want = np.argsort(perm, axis=-1)
        np.testing.assert_array_equal(inv, want)


def test_top_level_lists_only_existing_subpackages():
    import importlib.util

    import jaxkit

    assert not hasattr(jaxkit, "no_such_area")  # False, not an exception
    for name in jaxkit._SUBPACKAGES:
        assert importlib.util.find_spec(f"jaxkit.{name}") is not None, name
    assert "soft" in dir(jaxkit)


def test_interval_and_options():
    with pytest.raises(ValueError, match=r"`delta` must lie in \[0, 1\)"):
        _validate.in_interval(low=0, high=1, closed="left", delta=1.0)
    with pytest.raises(ValueError, match="`method` must be one of 'a', 'b'; got 'c'"):
        _validate.one_of(("a", "b"), method="c")
    # An option of the wrong kind is a TypeError (the rule for a wrong type).
    with pytest.raises(TypeError, match="`method` must be one of 'a', 'b'; got int 3"):
        _validate.one_of(("a", "b"), method=3)
    with pytest.raises(TypeError, match="`stage` must be one of 1, 2; got str '1'"):
        _validate.one_of((1, 2), stage="1")
    with pytest.raises(TypeError, match="`stage` must be one of 1, 2; got bool True"):
        _validate.one_of((1, 2), stage=True)
    with pytest.raises(ValueError, match="`stage` must be one of 1, 2; got 3"):
        _validate.one_of((1, 2), stage=np.int64(3))
    _validate.one_of((1, 2), stage=np.int64(2))
    _validate.one_of(("a", None), method=None)
    # A static flag: a bool (Python's or NumPy's); a string would read as true.
    with pytest.raises(TypeError, match="`hard` must be a bool, got str 'no'"):
        _validate.flags(soft=True, hard="no")
    with pytest.raises(TypeError, match="`hard` must be a bool, got int 1"):
        _validate.flags(hard=1)
    _validate.flags(hard=np.bool_(False), soft=False)


def test_shape_dtype_rank_errors_are_type_errors():
    with pytest.raises(TypeError, match="`x` must be a floating array"):
        _validate.floating(jnp.ones(3, jnp.int32), name="x")
    with pytest.raises(TypeError, match="`x` must have rank 2"):
        _validate.ndim(jnp.ones(3), 2, name="x")
    with pytest.raises(TypeError, match=r"`x` must have shape \(\*, 3\)"):
        _validate.shape(jnp.ones((2, 4)), (None, 3), name="x")
    with pytest.raises(TypeError, match="`a` and `b` must have the same shape"):
        _validate.same_shape(b=jnp.ones(2), a=jnp.ones(3))
    with pytest.raises(ValueError, match="`axis`=2 is out of range"):
        _validate.axis(2, 2)
    assert _validate.axis(-1, 3) == 2
    # the dtype checks name the argument for what JAX cannot type: jnp.result_type parses
    # "0.1" as a dtype name (its message names no argument), takes "float32" for a dtype and
    # None for float32; a list or an object gives JAX's own unnamed message
    checks = {
        _validate.floating: "a floating array",
        _validate.integer: "an integer array",
        _validate.boolean: "a bool array",
    }
    for check, what in checks.items():
        for bad in ("0.1", "float32", None, [1, "a"], object()):
            with pytest.raises(TypeError, match=f"`x` must be {what}, got {type(bad).__name__}"):
                check(bad, name="x")
    _validate.floating(jnp.ones(2), name="x")
    _validate.integer(3, name="x")
    _validate.boolean(True, name="x")
    # the concrete range checks: NumPy's comparison of "0.1" with a number was a ufunc error
    # naming nothing, and a bool passed `> 0`
    for bad in ("0.1", True, None):
        for check in (_validate.positive, _validate.non_negative):
            with pytest.raises(TypeError, match="`x` must be a real number or array"):
                check(x=bad)
        with pytest.raises(TypeError, match="`x` must be a real number or array"):
            _validate.in_interval(low=0, high=1, x=bad)
    _validate.in_interval(low=0, high=1, x=np.float32(0.5))
    with pytest.raises(TypeError, match=r"`x` must hold at least one sample.*\(0, 3\)"):
        _validate.nonempty(jnp.ones((0, 3)), name="x")
    with pytest.raises(TypeError, match="`x` must hold at least one sample"):
        _validate.nonempty(jnp.float32(1.0), name="x")
    _validate.nonempty(jnp.ones((1, 0)), name="x")
    with pytest.raises(TypeError, match=r"`x` must hold at least one feature on its last axis"):
        _validate.nonempty(jnp.ones((1, 0)), name="x", axis=-1, what="feature")
    _validate.nonempty(jnp.ones((0, 1)), name="x", axis=-1)


def test_error_if_concrete_and_traced():
    with pytest.raises(ValueError, match="`x` must be finite"):
        _validate.all_finite(jnp.array([1.0, jnp.nan]), name="x")
    f = jax.jit(lambda x: _validate.all_finite(x, name="x") * 2)
    np.testing.assert_allclose(f(jnp.ones(2)), 2.0)
    with pytest.raises(Exception, match="`x` must be finite"):
        jax.block_until_ready(f(jnp.array([jnp.inf, 1.0])))


def test_is_key():
    _validate.is_key(jax.random.key(0))
    _validate.is_key(jax.random.PRNGKey(0))
    with pytest.raises(TypeError, match="`key` must be a PRNG key"):
        _validate.is_key(3)


def test_checked_jit_checks_on_the_host_and_keeps_the_jitted_function():
    import inspect

    from jaxkit import soft
    from jaxkit._jit import checked_jit

    seen = []

    @checked_jit(arrays=("x",), flags=("neg",), static_argnames=("neg",), check=seen.append)
    def f(x, neg: bool = False):
        """Doc."""
        return -x if neg else x

    assert f.__doc__ == "Doc." and list(inspect.signature(f).parameters) == ["x", "neg"]
    np.testing.assert_array_equal(f(jnp.ones(2), np.bool_(True)), -np.ones(2))
    assert seen[-1]["neg"] is True  # NumPy's bool became Python's (one static value)
    f(jnp.ones(2))
    assert seen[-1]["neg"] is False  # defaults applied before `check`
    with pytest.raises(TypeError, match="`x` must be a numeric array"):
        f("abc")
    with pytest.raises(TypeError, match="`neg`"):
        f(jnp.ones(2), neg="no")
    # the jitted function's `lower`, with `neg` static (a branch taken at trace time)
    assert "negate" in f.lower(jnp.ones(2), neg=True).as_text()
    assert "negate" not in f.lower(jnp.ones(2), neg=False).as_text()
    assert soft.sqrt.lower(jnp.ones(3)).compile()(jnp.full(3, 4.0))[0] == 2.0


def test_dispatch_paths():
    calls = []
    ref = lambda: calls.append("ref") or "ref"
    ker = lambda interpret: calls.append(("ker", interpret)) or "ker"
    assert _dispatch.dispatch("xla", reference=ref, kernel=ker) == "ref"
    assert _dispatch.dispatch("pallas_interpret", reference=ref, kernel=ker) == "ker"
    assert calls[-1] == ("ker", True)
    assert _dispatch.dispatch("auto", reference=ref, kernel=ker, backend="cpu") == "ref"
    assert _dispatch.dispatch("auto", reference=ref, kernel=ker, backend="gpu") == "ker"
    assert calls[-1] == ("ker", False)

    def cannot(interpret):
        raise NotImplementedError("shape not supported")

    assert _dispatch.dispatch("auto", reference=ref, kernel=cannot, backend="gpu") == "ref"
    with pytest.raises(NotImplementedError):
        _dispatch.dispatch("pallas", reference=ref, kernel=cannot)
    with pytest.raises(ValueError, match="`implementation` must be one of"):
        _dispatch.dispatch("triton", reference=ref, kernel=ker)


def test_mesh_and_shard_batch():
    mesh = sharding.make_mesh(model=2)
    assert dict(mesh.shape) == {"data": 4, "model": 2}
    x = np.arange(16 * 3, dtype=np.float32).reshape(16, 3)
    xs = sharding.shard_batch({"x": x}, mesh)["x"]
    assert xs.sharding.spec == jax.P("data", None)
    np.testing.assert_array_equal(np.asarray(xs), x)
    with pytest.raises(ValueError, match="not divisible"):
        sharding.shard_batch(np.ones((6, 2)), mesh)
    with pytest.raises(ValueError, match="`model` must be a positive divisor"):
        sharding.make_mesh(model=3)
    # were an IndexError, an AttributeError, a silent spec and a late error
    with pytest.raises(ValueError, match="`devices`"):
        sharding.make_mesh(devices=[])
    with pytest.raises(TypeError, match="mesh"):
        sharding.replicate({"x": x}, "mesh")
    with pytest.raises(ValueError, match="`ndim`"):
        sharding.batch_spec(0)
    with pytest.raises(TypeError, match="fn"):
        sharding.rowwise(3, mesh)


def test_rowwise_matches_global(mesh8):
    x = jax.random.normal(jax.random.key(1), (16, 5))
    f = lambda a: jnp.sort(a, axis=-1) * 2
    xs = jax.device_put(x, jax.NamedSharding(mesh8, jax.P("data", None)))
    got = jax.jit(sharding.rowwise(f, mesh8))(xs)
    np.testing.assert_allclose(got, f(x))
    assert got.sharding.spec[0] == "data"
    with pytest.raises(ValueError, match="`axis` must be one of"):
        sharding.rowwise(f, mesh8, axis="model")


def test_eight_fake_devices():
    assert jax.device_count() == 8


OPTIONAL_MODULES = (
    "flax",
    "haiku",
    "numpyro",
    "orbax",
    "safetensors",
    "dp_accounting",
    "e3nn_jax",
    "cvxpy",
    "clarabel",
    "sklearn",
    "statsmodels",
    "matplotlib",
    "tqdm",
    "ott",
)


def test_subpackage_imports_touch_no_optional_dependency():
    # A core install (no extras) must import every subpackage: the optional
    # dependencies are imported lazily, inside the functions that need them.
    import subprocess
    import sys

    import jaxkit

    code = (
        "import importlib, sys\n"
        f"subs = {list(jaxkit._SUBPACKAGES)!r}\n"
        f"opt = {list(OPTIONAL_MODULES)!r}\n"
        "bad = {}\n"
        "for s in subs:\n"
        "    importlib.import_module('jaxkit.' + s)\n"
        "    got = [m for m in opt if m in sys.modules and m not in bad.get('_seen', [])]\n"
        "    if got: bad[s] = got; bad.setdefault('_seen', []).extend(got)\n"
        "bad.pop('_seen', None)\n"
        "print(bad)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120
    ).stdout.strip()
    assert out == "{}", f"subpackage imports pulled in optional dependencies: {out}"


def test_bench_line_without_target_says_null(capsys):
    import json

    from scripts.bench import _harness

    t = _harness.Timing(median_s=1.0, compile_s=0.1, peak_mem_mb=None)
    a = _harness.Timing(median_s=2.0, compile_s=None, peak_mem_mb=None)
    kw = dict(bench="b", case="c", sizes={}, ours=t, anchor="a", anchor_t=a)
    assert _harness.emit(**kw, target=None)["ok"] is None
    assert _harness.emit(**kw, target=1.5)["ok"] is True
    assert _harness.emit(**kw, target=3.0)["ok"] is False
    assert _harness.emit(**{**kw, "anchor_t": None}, target=1.0)["ok"] is None
    lines = [json.loads(x) for x in capsys.readouterr().out.splitlines()]
    assert [x["ok"] for x in lines] == [None, True, False, None]


def test_every_example_counts_in_an_area_budget():
    # tests/conftest.py attributes each example's slow test to its area's budget
    from pathlib import Path

    from tests import conftest

    root = Path(__file__).resolve().parents[1]
    stems = {p.stem for p in (root / "examples").glob("*.py") if not p.name.startswith("_")}
    assert stems == set(conftest._EXAMPLE_AREAS)
    areas = {p.name for p in (root / "tests").iterdir() if p.is_dir()} | {"core"}
    for stem, area in conftest._EXAMPLE_AREAS.items():
        assert area.partition(".")[0] in areas, (stem, area)
    node = "tests/examples/test_examples.py::test_example[irstd_synthetic]"
    assert conftest._area(node) == "examples.vision.irdet"
    with pytest.raises(KeyError, match="_EXAMPLE_AREAS"):
        conftest._area("tests/examples/test_examples.py::test_example[new_demo]")
    pool, *rows = conftest._slow_budget_lines(
        {"examples.soft": 300.0, "examples.core": 200.0, "data": 90.0, "examples.data": 40.0}
        | {"soft": 100.0}
    )
    assert "500.0 s  budget 450" in pool
    assert rows == [
        "data           tests + examples   130.0 s  budget 120  OVER",
        "soft           tests              100.0 s  budget 900",
    ]
