"""local_cluster requires Ray's auth token: a client without it is refused, one with it runs tasks.

(A token-less client used to connect and run a task as this user.) Clients are separate
processes, as another user's or another machine's would be.
"""

import os
import subprocess
import sys

import pytest

from tests.ray_helpers import ROOT, ClusterProcess

CLIENT = """
import os, sys
import ray
ray.init(address=sys.argv[1], _node_ip_address="127.0.0.1", log_to_driver=False, configure_logging=False)
print("ran as", ray.get(ray.remote(num_cpus=0)(lambda: os.getuid()).remote(), timeout=60))
"""


@pytest.fixture(scope="module")
def cluster():
    process = ClusterProcess(nodes=1)
    try:
        yield process
    finally:
        process.stop()


def _client(address: str, **env_changes) -> subprocess.CompletedProcess:
    env = {**os.environ, "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0", "RAY_USAGE_STATS_ENABLED": "0"}
    for name, value in env_changes.items():
        if value is None:
            env.pop(name, None)
        else:
            env[name] = value
    return subprocess.run([sys.executable, "-c", CLIENT, address], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=120)


def test_a_client_without_the_token_is_refused(cluster, tmp_path):
    # No token anywhere: HOME has no ~/.ray/auth_token, no RAY_AUTH_TOKEN(_PATH); Ray's default mode.
    tokenless = dict(HOME=str(tmp_path), RAY_AUTH_TOKEN=None, RAY_AUTH_TOKEN_PATH=None, RAY_AUTH_MODE=None)
    refused = _client(cluster.address, **tokenless)  # sends no token: the cluster does not answer
    assert refused.returncode != 0 and "ran as" not in refused.stdout
    assert "Failed to connect to Ray cluster" in refused.stderr, refused.stderr[-2000:]
    asks_token = _client(cluster.address, **{**tokenless, "RAY_AUTH_MODE": "token"})
    assert asks_token.returncode != 0 and "ran as" not in asks_token.stdout
    assert "AuthenticationError" in asks_token.stderr
    wrong = _client(cluster.address, **{**tokenless, "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": "0" * 32})
    assert wrong.returncode != 0 and "ran as" not in wrong.stdout
    assert "Failed to connect to Ray cluster" in wrong.stderr, wrong.stderr[-2000:]


def test_a_client_with_the_token_runs_tasks(cluster):
    connected = _client(cluster.address, RAY_AUTH_MODE="token")  # the token: this user's ~/.ray/auth_token
    assert connected.returncode == 0, connected.stderr[-2000:]
    assert connected.stdout.startswith("ran as")


def test_rlpar_sends_this_users_token_by_itself(cluster):
    """No RAY_AUTH_MODE set: rlpar, joining an explicit address, turns token mode on."""
    script = ("import sys; from rlpar.cluster.connection import RayConnection; "
              "c = RayConnection(address=sys.argv[1], num_cpus=None, object_store_mb=100); "
              "import ray; print('ran', ray.get(ray.remote(num_cpus=0)(lambda: 1).remote(), timeout=60)); c.shutdown()")
    env = {key: value for key, value in os.environ.items() if key != "RAY_AUTH_MODE"}
    done = subprocess.run([sys.executable, "-c", script, cluster.address], cwd=ROOT, capture_output=True, text=True,
                          timeout=120, env={**env, "PYTHONPATH": str(ROOT)})
    assert done.returncode == 0, done.stderr[-2000:]
    assert "ran 1" in done.stdout
