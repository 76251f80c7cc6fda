"""Tests of examples/train_pod.py: device-count invariance, resume, two processes."""

import importlib.util
import signal
import subprocess
import sys

import jax
import numpy as np
import pytest

from tests._subprocess import ROOT, cpu_env, last_json, run_processes

SCRIPT = ROOT / "examples" / "train_pod.py"


def _load():
    spec = importlib.util.spec_from_file_location("examples.train_pod", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


pod = _load()


def _user_program():
    # The script is a user program: optax.adam needs standard promotion.
    return jax.numpy_dtype_promotion("standard")


def test_param_specs_split_on_model():
    specs = pod.param_specs(pod.CONFIG, model_size=2)
    assert specs["layers"]["wq"] == jax.P(None, None, "model")
    assert specs["layers"]["wo"] == jax.P(None, "model", None)
    assert specs["layers"]["w_down"] == jax.P(None, "model", None)
    assert specs["embed"] == jax.P("model", None)
    assert specs["lm_head"] == jax.P(None, "model")
    assert specs["final_norm"] == jax.P(None)
    # an axis that does not divide stays replicated (wq has 4*8 = 32 columns)
    assert pod.param_specs(pod.CONFIG, model_size=3)["layers"]["wq"] == jax.P(None, None, None)
    assert pod.param_specs(pod.CONFIG, model_size=1)["embed"] == jax.P(None, None)


def test_synthetic_tokens_depend_only_on_seed_and_step():
    a = pod.synthetic_tokens(3, seed=0)
    assert a.shape == (pod.BATCH, pod.SEQ + 1) and a.dtype == np.int32
    np.testing.assert_array_equal(a, pod.synthetic_tokens(3, seed=0))
    assert not np.array_equal(a, pod.synthetic_tokens(4, seed=0))
    assert a.min() >= 0 and a.max() < pod.CONFIG.vocab_size


def test_one_device_and_eight_devices_give_the_same_losses():
    assert jax.device_count() == 8
    with _user_program():
        one = pod.train(steps=10, devices=jax.devices()[:1])
        eight = pod.train(steps=10, model_parallel=2)  # mesh data=4 x model=2
    assert one["mesh"] == {"data": 1, "model": 1}
    assert eight["mesh"] == {"data": 4, "model": 2}
    l1, l8 = np.asarray(one["losses"]), np.asarray(eight["losses"])
    assert l1.shape == (10,)
    np.testing.assert_allclose(l8, l1, rtol=0, atol=1e-5)
    assert l1[-1] < l1[0] - 1.0  # it learns (from about ln 64 = 4.16; 4.7 -> 2.8 here)
    for a, b in zip(jax.tree.leaves(one["params"]), jax.tree.leaves(eight["params"]), strict=True):
        np.testing.assert_allclose(a, b, rtol=0, atol=1e-4)


@pytest.mark.slow  # resume is also covered by the SIGKILL test (slow)
def test_resume_in_process_continues_from_checkpoint(tmp_path):
    with _user_program():
        full = pod.train(steps=6, devices=jax.devices()[:2], model_parallel=2)
        pod.train(
            steps=4,
            devices=jax.devices()[:2],
            model_parallel=2,
            ckpt_dir=str(tmp_path),
            ckpt_every=2,
        )
        rest = pod.train(
            steps=6,
            devices=jax.devices()[:2],
            model_parallel=2,
            ckpt_dir=str(tmp_path),
            ckpt_every=2,
        )
    assert rest["start_step"] == 4 and len(rest["losses"]) == 2
    np.testing.assert_array_equal(rest["losses"], full["losses"][4:])
    for a, b in zip(jax.tree.leaves(rest["params"]), jax.tree.leaves(full["params"]), strict=True):
        np.testing.assert_array_equal(a, b)


# ----------------------------------------------------------------- subprocess tests


def _cmd(*args):
    return [sys.executable, str(SCRIPT), *map(str, args)]


def _flat(params):  # the names examples/train_pod.py --params-out writes
    return {jax.tree_util.keystr(k): v for k, v in jax.tree_util.tree_flatten_with_path(params)[0]}


def _npz(path):
    with np.load(path) as f:
        return {k: f[k] for k in f.files}


@pytest.mark.slow
def test_sigkill_after_checkpoint_then_resume_is_bit_identical(tmp_path):
    common = ("--steps", 8, "--ckpt-every", 4, "--model-parallel", 2)
    # the uninterrupted reference runs in this process (same 8 CPU devices, same mesh)
    with _user_program():
        ref_res = pod.train(steps=8, model_parallel=2)

    ck = tmp_path / "crash"
    with subprocess.Popen(
        _cmd(*common, "--ckpt-dir", ck, "--hang-after", 4),
        env=cpu_env(8),
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    ) as proc:
        try:
            for line in proc.stdout:
                if line.strip().endswith("hang"):  # step 4's checkpoint is on disk
                    break
            else:
                pytest.fail("the run ended before reaching its checkpoint")
            proc.send_signal(signal.SIGKILL)
        finally:
            proc.kill()
            proc.wait(timeout=60)
    assert proc.returncode == -signal.SIGKILL

    res = subprocess.run(
        _cmd(*common, "--ckpt-dir", ck, "--params-out", tmp_path / "resumed.npz"),
        env=cpu_env(8),
        capture_output=True,
        text=True,
        timeout=600,
        check=True,
    )
    resumed = last_json(res.stdout)
    assert resumed["start_step"] == 4
    assert resumed["losses"] == ref_res["losses"][4:]
    a, b = _flat(ref_res["params"]), _npz(tmp_path / "resumed.npz")
    assert a.keys() == b.keys() and len(a) > 5
    for k in a:
        assert a[k].dtype == b[k].dtype and np.array_equal(a[k], b[k]), k  # bit-identical


@pytest.mark.slow
def test_two_processes_train_one_model(tmp_path):
    args = ("--steps", 6, "--ckpt-every", 3, "--model-parallel", 2, "--ckpt-dir", tmp_path / "ck")
    outs = run_processes(SCRIPT, args, n_processes=2, local_devices=2)
    assert [o["process_id"] for o in outs] == [0, 1]
    for o in outs:
        assert o["process_count"] == 2 and o["devices"] == 4 and o["local_devices"] == 2
        assert o["mesh"] == {"data": 2, "model": 2}
    assert outs[0]["losses"] == outs[1]["losses"]  # one model, one loss
    assert outs[0]["param_abs_sum"] == outs[1]["param_abs_sum"]
    assert (tmp_path / "ck" / "6").exists()
    with _user_program():
        single = pod.train(steps=6, devices=jax.devices()[:1])
    np.testing.assert_allclose(outs[0]["losses"], single["losses"], rtol=0, atol=1e-5)
