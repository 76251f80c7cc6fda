"""Launching example scripts as simulated multi-device or multi-process jobs (tests only).

One copy of the environment set-up, the JSON read-back and the two-process
``jax.distributed`` launcher that the pod-training and private-LM tests share.
"""

import importlib.util
import json
import os
import pathlib
import socket
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]


def load_example(stem: str, module_name: str | None = None):
    """Import ``examples/<stem>.py`` as a module named ``module_name`` (``examples.<stem>``)."""
    path = ROOT / "examples" / f"{stem}.py"
    spec = importlib.util.spec_from_file_location(module_name or f"examples.{stem}", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def cpu_env(n_devices: int) -> dict:
    """The current environment with ``n_devices`` simulated CPU devices and the repo on the path."""
    env = dict(os.environ)
    flags = f"{env.get('XLA_FLAGS', '')} --xla_force_host_platform_device_count={n_devices}"
    env["XLA_FLAGS"] = flags.strip()
    env["JAX_PLATFORMS"] = "cpu"
    env["PYTHONPATH"] = f"{ROOT}{os.pathsep}{env.get('PYTHONPATH', '')}"
    return env


def last_json(out: str) -> dict:
    """The last line of ``out`` that is a JSON object (the scripts print their result last)."""
    return json.loads([ln for ln in out.splitlines() if ln.startswith("{")][-1])


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_processes(script, args, *, n_processes: int, local_devices: int, timeout: int = 600):
    """Run ``script`` as one ``jax.distributed`` job of ``n_processes`` local processes.

    Each process gets ``--num-processes``, ``--coordinator`` and its ``--process-id`` after
    ``args``; returns each process's last JSON line, in process order. A process that fails
    fails the test with its stderr tail; all processes are killed on the way out.
    """
    port = free_port()
    common = [str(a) for a in args]
    common += ["--num-processes", str(n_processes), "--coordinator", f"127.0.0.1:{port}"]
    procs = [
        subprocess.Popen(
            [sys.executable, str(script), *common, "--process-id", str(i)],
            env=cpu_env(local_devices),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for i in range(n_processes)
    ]
    outs = []
    try:
        for p in procs:
            out, err = p.communicate(timeout=timeout)
            assert p.returncode == 0, err[-3000:]
            outs.append(last_json(out))
    finally:
        for p in procs:
            p.kill()
    return outs
