"""local_cluster requires Ray's auth token: a client without it is refused, one with it runs tasks.
rlpar joins a cluster with the cluster's own authentication mode, found out by asking it, or
refuses up front in one line naming what to set.

(A token-less client used to connect and run a task as this user.) Clients are separate
processes, as another user's or another machine's would be.
"""

import json
import os
import socket
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from tests.ray_helpers import ROOT, ClusterProcess, RayStartHead

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


@pytest.mark.slow
@pytest.mark.ray
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


@pytest.mark.slow
@pytest.mark.ray
def test_a_client_with_the_token_runs_tasks(cluster):
    connected = _client(cluster.address, RAY_AUTH_MODE="token")  # the token: this user's ~/.ray/auth_token
    assert connected.returncode == 0, connected.stderr[-2000:]
    assert connected.stdout.startswith("ran as")


@pytest.mark.slow
@pytest.mark.ray
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


# -- joining a user's cluster: its authentication mode found out, not guessed from a token file ---
def _home_with_a_token(tmp_path: Path) -> Path:
    """A home directory holding ~/.ray/auth_token, as any earlier local rlpar run leaves."""
    home = tmp_path / "home"
    (home / ".ray").mkdir(parents=True)
    (home / ".ray" / "auth_token").write_text("ab" * 32)
    return home


def _train_on(address: str, run_dir: Path, home: Path, **env_changes) -> subprocess.CompletedProcess:
    env = {**os.environ, "HOME": str(home), "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0"}
    for name in ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH", "RAY_ADDRESS"):
        env.pop(name, None)
    env.update(env_changes)
    return subprocess.run(
        [sys.executable, "main.py", "parallel=distributed", "workers=4", "hardware=cluster", f"ray.address={address}",
         "total_steps=4000", "progress=false", f"hydra.run.dir={run_dir}"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=180)


def _metrics(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


@pytest.fixture(scope="module")
def open_cluster():
    """Two nodes on 127.0.0.1 without authentication (an older Ray's, or RAY_AUTH_MODE=disabled)."""
    process = ClusterProcess(nodes=2, auth="disabled")
    try:
        yield process
    finally:
        process.stop()


@pytest.mark.slow
@pytest.mark.ray
def test_cli_trains_on_a_cluster_without_authentication_while_a_token_file_exists(open_cluster, tmp_path):
    """(A token file used to turn token mode on: the cluster then cancelled every env runner, and
    the run stopped after 101 replacements.)"""
    home = _home_with_a_token(tmp_path)
    done = _train_on(open_cluster.address, tmp_path / "run", home)
    assert done.returncode == 0, done.stderr[-3000:]
    rows = _metrics(tmp_path / "run")
    assert rows[-1]["env_steps"] >= 4000 and rows[-1]["worker_restarts"] == 0
    assert max(row["num_nodes"] for row in rows) == 2 and rows[-1]["live_workers"] == 4


@pytest.mark.slow
@pytest.mark.ray
def test_cli_trains_on_a_default_ray_start_head_with_token_authentication(tmp_path):
    """A user's own head: a token made by `ray get-auth-token --generate`, which `ray start --head`
    then requires (Ray 2.60 turns token mode on when a token exists)."""
    home = tmp_path / "home"
    home.mkdir()
    env = {key: value for key, value in os.environ.items() if not key.startswith("RAY_AUTH")} | {"HOME": str(home)}
    subprocess.run([str(Path(sys.executable).with_name("ray")), "get-auth-token", "--generate"], env=env, check=True,
                   capture_output=True, timeout=60)
    token = home / ".ray" / "auth_token"
    assert token.stat().st_mode & 0o044  # readable by all, as Ray writes it: still used
    head = RayStartHead(env=env)
    try:
        assert _call_gcs_status(head.address, None) == "UNAUTHENTICATED"
        done = _train_on(head.address, tmp_path / "run", home)
    finally:
        head.stop()
    assert done.returncode == 0, done.stderr[-3000:]
    assert _metrics(tmp_path / "run")[-1]["env_steps"] >= 4000


def _call_gcs_status(address: str, token: str | None) -> str:
    from rlpar.cluster.auth import _call_gcs

    return _call_gcs(address, token)


@pytest.mark.slow
@pytest.mark.ray
def test_a_mode_that_contradicts_the_cluster_is_refused_up_front_in_one_line(open_cluster, tmp_path):
    refused = _train_on(open_cluster.address, tmp_path / "run", _home_with_a_token(tmp_path), RAY_AUTH_MODE="token")
    assert refused.returncode == 2, refused.stderr[-3000:]
    assert refused.stderr.count("\n") == 1 and refused.stderr.startswith("rlpar: invalid config: ray.address:")
    assert "without authentication" in refused.stderr and "RAY_AUTH_MODE=disabled" in refused.stderr
    assert not (tmp_path / "run" / "metrics.jsonl").exists()


@pytest.mark.parametrize(
    ("env_changes", "expected"),
    [
        ({"RAY_AUTH_MODE": "disabled"}, "requires Ray's auth token, but RAY_AUTH_MODE=disabled"),
        ({"RAY_AUTH_TOKEN": "0" * 64}, "refused the auth token from RAY_AUTH_TOKEN"),
        ({"HOME": "{empty_home}"}, "none is found (RAY_AUTH_TOKEN is unset and {empty_home}/.ray/auth_token is missing"),
        ({"RAY_AUTH_TOKEN_PATH": "{empty_home}/token"}, "RAY_AUTH_TOKEN_PATH names {empty_home}/token, which is missing"),
    ],
    ids=["mode-disabled", "wrong-token", "no-token", "token-path-missing"],
)
@pytest.mark.slow
@pytest.mark.ray
def test_what_keeps_this_process_off_a_token_cluster_is_named_before_anything_starts(cluster, tmp_path, monkeypatch,
                                                                                     env_changes, expected):
    from rlpar.cluster.address import ray_address_problem

    empty_home = tmp_path / "empty"
    empty_home.mkdir()
    for name in ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env_changes.items():
        monkeypatch.setenv(name, value.format(empty_home=empty_home))
    problem = ray_address_problem(cluster.address)
    assert problem is not None and expected.format(empty_home=empty_home) in problem, problem
    monkeypatch.setenv("RAY_ADDRESS", cluster.address)
    assert ray_address_problem("auto") == f"auto found {cluster.address} in RAY_ADDRESS; {problem}"


def test_an_address_that_is_no_ray_gcs_is_refused(tmp_path):
    from rlpar.cluster.address import ray_address_problem

    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        address = "127.0.0.1:%d" % server.getsockname()[1]
        threading.Thread(target=_answer_as_a_web_server, args=(server,), daemon=True).start()
        problem = ray_address_problem(address)
    assert problem.startswith(f"{address} does not answer as a Ray cluster's GCS"), problem


def _answer_as_a_web_server(server: socket.socket) -> None:
    while True:
        try:
            client, _ = server.accept()
        except OSError:  # closed
            return
        with client:
            client.sendall(b"HTTP/1.0 400 Bad Request\r\n\r\n")


# -- the token rlpar makes for its own instances ---------------------------------------------------
@pytest.fixture
def token_home(tmp_path, monkeypatch):
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    for name in ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH"):
        monkeypatch.delenv(name, raising=False)  # restored after the test, whatever rlpar sets
    return home


@pytest.mark.slow
def test_the_token_rlpar_makes_is_private_whole_and_where_ray_reads_it(token_home, tmp_path, monkeypatch):
    from rlpar.cluster.auth import require_token_auth

    token = token_home / ".ray" / "auth_token"
    token.parent.mkdir()
    token.write_text("")  # what a write cut short by a full disk leaves: replaced
    assert require_token_auth(create_token=True) == str(token)
    assert token.stat().st_mode & 0o777 == 0o600 and len(token.read_text().strip()) == 64
    named = tmp_path / "elsewhere" / "token"
    monkeypatch.setenv("RAY_AUTH_TOKEN_PATH", str(named))  # Ray reads only this file then
    assert require_token_auth(create_token=True) == str(named)
    assert named.stat().st_mode & 0o777 == 0o600 and named.read_text() != token.read_text()


@pytest.mark.slow
def test_a_token_write_that_fails_leaves_no_file(token_home):
    """ENOSPC for real: the temporary file is /dev/full. (Ray's own writer opened the token file
    itself and truncated it first.)"""
    from rlpar.cluster.auth import require_token_auth

    folder = token_home / ".ray"
    folder.mkdir()
    (folder / f".auth_token.{os.getpid()}.tmp").symlink_to("/dev/full")
    with pytest.raises(OSError, match="No space left"):
        require_token_auth(create_token=True)
    assert list(folder.iterdir()) == []
