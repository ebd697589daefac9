"""A two-node Ray cluster on 127.0.0.1, started in its own process (as a user's cluster would be)."""

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


class ClusterProcess:
    def __init__(self, nodes: int = 2, cpus_per_node: float = 1, timeout: float = 120, auth: str = "token",
                 env: dict | None = None):
        """`auth`: token (clients need Ray's auth token) or disabled (none, as older Rays' clusters).
        `env`: more environment variables for the cluster's processes (Ray's settings)."""
        env = {**os.environ, "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0", "PYTHONPATH": str(ROOT), **(env or {})}
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "rlpar.cluster.local_cluster", "--nodes", str(nodes), "--cpus-per-node", str(cpus_per_node),
             "--auth", auth],
            cwd=ROOT,
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        deadline = time.monotonic() + timeout
        self.address = None
        while time.monotonic() < deadline:
            line = self.proc.stdout.readline()
            if line.startswith("address="):
                self.address = line.strip().split("=", 1)[1]
                break
            if not line and self.proc.poll() is not None:
                break
        if self.address is None:
            self.stop()
            raise RuntimeError("the test Ray cluster did not start")

    def command(self, command: str) -> str:
        """`add` or `remove` a worker node; returns the new or removed node's id."""
        self.proc.stdin.write(command + "\n")
        self.proc.stdin.flush()
        key, _, value = self.proc.stdout.readline().strip().partition("=")
        if key not in ("added", "removed"):
            raise RuntimeError(f"cluster command {command!r} failed: {key}={value}")
        return value

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)


@contextmanager
def connected_cluster(nodes: int = 2, cpus_per_node: float = 1):
    """A ClusterProcess with this process connected to it as the driver; both stopped at exit."""
    import ray

    from rlpar.cluster.auth import require_token_auth

    cluster = ClusterProcess(nodes=nodes, cpus_per_node=cpus_per_node)
    # The cluster requires Ray's auth token; this driver sends it from here on (so does every Ray
    # instance rlpar starts in the rest of the session: the same mode for all).
    require_token_auth(create_token=False)
    try:
        ray.init(
            address=cluster.address,
            _node_ip_address="127.0.0.1",
            runtime_env={"env_vars": {"PYTHONPATH": str(ROOT)}},
            log_to_driver=False,
            configure_logging=False,
        )
        yield cluster
    finally:
        ray.shutdown()
        cluster.stop()


class RayStartHead:
    """`ray start --head --block` on 127.0.0.1, as a user starts a real cluster's head (Ray 2.60:
    token authentication on unless RAY_AUTH_MODE=disabled). Stopped by SIGTERM to that process,
    which stops its node's processes; never `ray stop`, which stops every Ray on the machine.
    Its own temporary directory keeps the machine's ray_current_cluster file untouched."""

    def __init__(self, *, env: dict, num_cpus: int = 2, timeout: float = 120):
        self.temp_dir = tempfile.mkdtemp(prefix="rlpar-ray-", dir="/tmp")  # short: Ray's socket paths have a limit
        port = free_port()
        self.address = f"127.0.0.1:{port}"
        self.proc = subprocess.Popen(
            [str(Path(sys.executable).with_name("ray")), "start", "--head", "--node-ip-address=127.0.0.1", f"--port={port}",
             f"--num-cpus={num_cpus}", "--include-dashboard=false", f"--object-store-memory={200 * 1024 * 1024}",
             f"--temp-dir={self.temp_dir}", "--block"],
            env={**env, "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0", "RAY_USAGE_STATS_ENABLED": "0"},
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        )
        deadline, self.output = time.monotonic() + timeout, []
        while time.monotonic() < deadline:
            line = self.proc.stdout.readline()
            self.output.append(line)
            if "Ray runtime started" in line:
                threading.Thread(target=self.proc.stdout.read, daemon=True).start()  # its pipe never fills
                return
            if not line and self.proc.poll() is not None:
                break
        self.stop()
        raise RuntimeError("`ray start --head` did not start: " + "".join(self.output)[-2000:])

    def stop(self) -> None:
        stop_process(self.proc, signal.SIGTERM)
        shutil.rmtree(self.temp_dir, ignore_errors=True)


def stop_process(proc: subprocess.Popen, sig: int, wait_s: float = 60) -> int:
    """Send `sig` (as a user or a scheduler would) and wait; SIGKILL if it has not gone in `wait_s`."""
    if proc.poll() is None:
        proc.send_signal(sig)
        try:
            proc.wait(wait_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)
    return proc.returncode


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]
