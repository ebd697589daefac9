"""deploy/slurm's Ray commands, run on 127.0.0.1 without SLURM: a head and a worker node started
by its functions, then a run driven by `rlpar_train`, with runners on both nodes."""

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

import pytest

from tests.ray_helpers import ROOT, free_port, stop_process

pytestmark = [pytest.mark.slow, pytest.mark.ray]

NODE_PORTS = ("NODE_MANAGER_PORT", "OBJECT_MANAGER_PORT", "RUNTIME_ENV_AGENT_PORT", "DASHBOARD_AGENT_GRPC_PORT",
              "DASHBOARD_AGENT_LISTEN_PORT", "METRICS_EXPORT_PORT")


def slurm_step(command: str, env: dict, **kwargs):
    return subprocess.Popen(["bash", "-c", f"source deploy/slurm/ray_nodes.sh && {command}"], cwd=ROOT, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, **kwargs)


def node_env(base: dict, worker_ports: range) -> dict:
    """Each node of one machine its own ports (on a real allocation every node has the defaults)."""
    env = {**base, **{f"RAY_{name}": str(free_port()) for name in NODE_PORTS}}
    return {**env, "RAY_MIN_WORKER_PORT": str(worker_ports.start), "RAY_MAX_WORKER_PORT": str(worker_ports.stop - 1)}


def wait_for_line(proc: subprocess.Popen, text: str, timeout: float) -> str:
    lines, deadline = [], time.monotonic() + timeout
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        lines.append(line)
        if text in line:
            threading.Thread(target=proc.stdout.read, daemon=True).start()  # its pipe never fills
            return "".join(lines)
        if not line and proc.poll() is not None:
            break
    raise AssertionError(f"no {text!r}: " + "".join(lines)[-2000:])


def test_the_slurm_scripts_ray_commands_start_a_two_node_cluster_that_rlpar_trains_on(tmp_path):
    home = tmp_path / "home"
    (home / ".ray").mkdir(parents=True)
    (home / ".ray" / "auth_token").write_text("cd" * 32)  # the shared home's token, as the sbatch makes it
    temp_dir = tempfile.mkdtemp(prefix="rlpar-slurm-", dir="/tmp")  # short: Ray's socket paths have a limit
    port = free_port()
    base = {**os.environ, "HOME": str(home), "RLPAR_PYTHON": sys.executable, "RAY_PORT": str(port),
            "RAY_TEMP_DIR": temp_dir, "RAY_NUM_CPUS": "1",
            "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "1"}  # Ray refuses a second node joining a 127.0.0.1 head without it
    for name in ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH", "RAY_ADDRESS"):
        base.pop(name, None)
    head = worker = None
    address = f"127.0.0.1:{port}"
    try:
        head = slurm_step("ray_head 127.0.0.1", node_env(base, range(21000, 21400)))
        wait_for_line(head, "Ray runtime started", 120)
        worker = slurm_step(f"ray_worker {address} 127.0.0.1", node_env(base, range(21400, 21800)))
        wait_for_line(worker, "Ray runtime started", 120)
        up = slurm_step(f"wait_for_nodes {address} 2 120", base)
        assert up.wait(180) == 0 and "2 of 2 Ray nodes up" in up.stdout.read()
        run_dir = tmp_path / "run"
        train = slurm_step(f"rlpar_train {address} workers=4 ray.cpus_per_worker=0.5 total_steps=4000 progress=false "
                           f"hydra.run.dir={run_dir}", base)
        output = train.communicate(timeout=300)[0]
        assert train.returncode == 0, output[-3000:]
        # `sbatch rlpar.sbatch resume=RUN`: rlpar_train passes its placement (parallel, hardware, ray.address) again
        resume = slurm_step(f"rlpar_train {address} resume={run_dir} total_steps=6000 progress=false", base)
        output = resume.communicate(timeout=300)[0]
        assert resume.returncode == 0, output[-3000:]
    finally:
        for proc in (worker, head):  # SIGTERM to `ray start --block` (exec'd by the step) stops its node
            if proc is not None:
                stop_process(proc, signal.SIGTERM)
        shutil.rmtree(temp_dir, ignore_errors=True)
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [row["iteration"] for row in rows] == list(range(1, len(rows) + 1))  # the resumed run's rows follow on
    assert rows[-1]["env_steps"] >= 6000 and rows[-1]["worker_restarts"] == 0
    assert max(row["num_nodes"] for row in rows) == 2  # 0.5-CPU runners on 1-CPU nodes: both nodes host them
