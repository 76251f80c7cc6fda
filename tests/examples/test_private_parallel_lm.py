"""Slow tests of examples/private_parallel_lm.py: the PRISM job on 64 simulated devices
(data 8 x model 8) against one device, and as a real two-process jax.distributed job."""

import subprocess
import sys

import pytest

from tests._subprocess import ROOT, cpu_env, last_json, run_processes

SCRIPT = ROOT / "examples" / "private_parallel_lm.py"

# run in a subprocess with 64 CPU devices: one device, then the data 8 x model 8 mesh
_SCALE = """
import importlib.util, json, sys
import jax, numpy as np
spec = importlib.util.spec_from_file_location("ppl", sys.argv[1])
m = importlib.util.module_from_spec(spec)
spec.loader.exec_module(m)
one = m.private_job(3, devices=jax.devices()[:1])
big = m.private_job(3, model_parallel=8)
diff = max(float(np.max(np.abs(a - b))) for a, b in
           zip(jax.tree.leaves(one["lora"]), jax.tree.leaves(big["lora"]), strict=True))
print(json.dumps({"one": one["losses"], "big": big["losses"], "mesh": big["mesh"],
                  "memory": big["memory"], "lora_max_diff": diff, "devices": jax.device_count()}))
"""


@pytest.mark.slow
def test_64_devices_give_the_one_device_losses_and_split_the_memory():
    res = subprocess.run(
        [sys.executable, "-c", _SCALE, str(SCRIPT)],
        env=cpu_env(64),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert res.returncode == 0, res.stderr[-3000:]
    out = last_json(res.stdout)
    assert out["devices"] == 64 and out["mesh"] == {"data": 8, "model": 8}
    assert len(out["one"]) == 3
    for a, b in zip(out["one"], out["big"], strict=True):
        assert abs(a - b) <= 1e-5, (out["one"], out["big"])
    assert out["lora_max_diff"] < 1e-4
    mem = out["memory"]  # XLA's per-device argument bytes: params + factors + optimizer state
    assert 0 < mem["per_device_bytes"] <= 1.25 * mem["total_bytes"] / 8, mem


@pytest.mark.slow
def test_two_processes_run_one_private_job():
    outs = run_processes(SCRIPT, ["--steps", 2], n_processes=2, local_devices=4)
    assert [o["process_index"] for o in outs] == [0, 1]
    for o in outs:
        assert o["process_count"] == 2 and o["devices"] == 8 and o["local_devices"] == 4
        assert o["mesh"] == {"data": 8, "model": 1}
    assert outs[0]["losses"] == outs[1]["losses"]  # one job, one loss
    assert outs[0]["lora_abs_sum"] == outs[1]["lora_abs_sum"]
