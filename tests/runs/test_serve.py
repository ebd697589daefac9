"""`rlpar.load_policy` and `rlpar serve` on real (tiny) CartPole runs, over real HTTP on 127.0.0.1:
episodes driven through POST /act give `rlpar evaluate`'s returns, 2,000 sequential requests have
a p99 latency under 20 ms, a recurrent policy keeps a state per session, a token is checked on
every request, and a non-loopback address without a token is refused (exit 2)."""

import http.client
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pytest
import yaml

from rlpar import load_policy
from rlpar.runtime.evaluate_run import EvaluateError, evaluate_run
from rlpar.serving.server import make_server
from tests.policy_runs import episode_returns, trained_run
from tests.ray_helpers import ROOT, free_port, stop_process

EPISODES, SEED = 10, 500
REQUESTS, P99_LIMIT_S = 2000, 0.020


@pytest.fixture(scope="module")
def cartpole(tmp_path_factory):
    """Trained far enough that its actions follow its observations, whitened (the preset leaves them raw)."""
    return trained_run(tmp_path_factory.mktemp("serve") / "ppo", "total_steps=8192", "model.normalize_obs=true")


@pytest.fixture(scope="module")
def lstm(tmp_path_factory):
    """Trained far enough that its actions depend on its memory."""
    return trained_run(tmp_path_factory.mktemp("serve") / "lstm", "model.recurrent=lstm", "total_steps=6144")


class Client:
    """One keep-alive connection, JSON in and out."""

    def __init__(self, url: str, token: str | None = None):
        host, port = url.removeprefix("http://").rsplit(":", 1)
        self.connection = http.client.HTTPConnection(host, int(port), timeout=30)
        self.headers = {"Content-Type": "application/json"} | ({"Authorization": f"Bearer {token}"} if token else {})

    def request(self, method: str, path: str, body=None, headers=None) -> tuple[int, dict]:
        data = None if body is None else json.dumps(body).encode()
        self.connection.request(method, path, body=data, headers=headers if headers is not None else self.headers)
        response = self.connection.getresponse()
        return response.status, json.loads(response.read())

    def act(self, **request):
        status, answer = self.request("POST", "/act", request)
        assert status == 200, answer
        return answer


@contextmanager
def served(policy, token=None):
    """`policy` served from a thread of this process on a free port of 127.0.0.1."""
    server = make_server(policy, "127.0.0.1", 0, token)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server.url
    finally:
        server.shutdown()
        server.server_close()
        thread.join(10)


@pytest.mark.slow
def test_served_episodes_give_evaluates_returns_and_sequential_requests_are_fast(cartpole, tmp_path):
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "rlpar", "serve", str(cartpole), "--port", str(port)], cwd=tmp_path,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env={**os.environ, "PYTHONPATH": str(ROOT)})
    try:
        line = proc.stdout.readline()
        assert line.startswith(f"serving {cartpole} on http://127.0.0.1:{port} "), line + proc.stderr.read()
        client = Client(f"http://127.0.0.1:{port}")
        status, described = client.request("GET", "/")
        assert status == 200 and described["action_space"] == {"type": "Discrete", "n": 2, "start": 0}
        assert described["source"]["run_dir"] == str(cartpole.resolve()) and described["state_size"] == 0

        served_returns = episode_returns(lambda obs, start: client.act(observation=obs.tolist())["action"],
                                         "CartPole-v1", EPISODES, SEED)
        evaluated = evaluate_run(cartpole, episodes=EPISODES, seed=SEED, video_episodes=0, tensorboard=False)
        assert served_returns == evaluated["returns"]

        obs = np.random.default_rng(0).uniform(-0.05, 0.05, (REQUESTS, 4)).tolist()
        latencies = []
        for row in obs:
            start = time.perf_counter()
            client.act(observation=row)
            latencies.append(time.perf_counter() - start)
        assert np.percentile(latencies, 99) < P99_LIMIT_S, np.percentile(latencies, [50, 99])
        batch = client.act(observations=obs[:16])["actions"]
        assert batch == [client.act(observation=row)["action"] for row in obs[:16]]
    finally:
        code = stop_process(proc, signal.SIGTERM)
        stderr = proc.stderr.read()
        proc.stdout.close()
        proc.stderr.close()
    assert code == 130 and "Traceback" not in stderr, stderr


@pytest.mark.slow
@pytest.mark.parametrize("host", ["0.0.0.0", "::"])
def test_a_non_loopback_address_needs_a_token(cartpole, tmp_path, host):
    proc = subprocess.run([sys.executable, "-m", "rlpar", "serve", str(cartpole), "--host", host], cwd=tmp_path,
                          capture_output=True, text=True, timeout=60, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.count("\n") == 1 and "--token" in proc.stderr and "Traceback" not in proc.stderr


@pytest.mark.slow
def test_the_token_is_checked_on_every_request(cartpole):
    policy = load_policy(cartpole)
    obs = [0.01, 0.02, 0.03, 0.04]
    with served(policy, token="s3cret") as url:
        client = Client(url, token="s3cret")
        for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": "s3cret"}):
            assert client.request("GET", "/", headers=headers)[0] == 401
            status, answer = client.request("POST", "/act", {"observation": obs}, headers=headers)
            assert status == 401 and "token" in answer["error"]
        assert client.act(observation=obs)["action"] == int(policy.act(np.array(obs, np.float32))[0])
        assert client.request("GET", "/")[0] == 200


@pytest.mark.slow
def test_a_recurrent_policy_keeps_a_state_per_session(lstm):
    policy = load_policy(lstm)
    rng = np.random.default_rng(1)
    observations = rng.uniform(-0.2, 0.2, (12, 2, 4)).astype(np.float32)  # 12 steps of two interleaved sessions
    expected, states = [], [None, None]
    for step in observations:
        for s in (0, 1):
            action, states[s] = policy.act(step[s], states[s])
            expected.append(int(action))
    forgetful = [int(policy.act(step[s])[0]) for step in observations for s in (0, 1)]
    assert forgetful != expected, "the policy's actions do not depend on its state: the test could not fail"
    with served(policy) as url:
        client = Client(url)
        got = [client.act(observation=step[s].tolist(), session=f"s{s}", reset=i == 0)["action"]
               for i, step in enumerate(observations) for s in (0, 1)]
        assert got == expected
        # a batch of sessions is the same as each session's request
        batch = client.act(observations=observations[0].tolist(), sessions=["b0", "b1"])["actions"]
        assert batch == expected[:2]
        # `reset` starts a session's episode again: its first action once more
        assert client.act(observation=observations[0][0].tolist(), session="s0", reset=True)["action"] == expected[0]
        status, answer = client.request("POST", "/act", {"observation": observations[0][0].tolist()})
        assert status == 400 and "session" in answer["error"]
        status, answer = client.request("POST", "/act", {"observation": [1.0, 2.0], "session": "x"})
        assert status == 400 and "shape [4]" in answer["error"]
        status, described = client.request("GET", "/")
        assert described["recurrent"] == "lstm" and described["state_size"] == policy.state_size


@pytest.mark.slow
def test_load_policy_acts_as_evaluate_on_one_observation_or_a_batch(cartpole, lstm):
    policy = load_policy(cartpole)
    assert policy.spec.normalize_obs and policy.acting.obs_inv_std.max() > 2  # observations whitened
    returns = episode_returns(lambda obs, start: policy.act(obs)[0], "CartPole-v1", 3, SEED)
    assert returns == evaluate_run(cartpole, episodes=3, seed=SEED, video_episodes=0, tensorboard=False)["returns"]

    recurrent = load_policy(lstm)
    obs = np.random.default_rng(2).uniform(-0.2, 0.2, (5, 4)).astype(np.float32)
    actions, state = recurrent.act(obs)
    assert actions.shape == (5,) and state.shape == (5, recurrent.state_size) and state.any()
    for row in range(5):
        action, one_state = recurrent.act(obs[row])
        assert action == actions[row] and np.allclose(one_state, state[row], rtol=0, atol=1e-12)
    with pytest.raises(ValueError, match="shape"):
        policy.act(np.zeros(3, np.float32))


@pytest.mark.slow
def test_stochastic_actions_are_drawn_from_seeded_noise(cartpole):
    obs = np.random.default_rng(3).uniform(-0.05, 0.05, (200, 4)).astype(np.float32)
    first, again = (load_policy(cartpole, stochastic=True, seed=7).act(obs)[0] for _ in range(2))
    greedy = load_policy(cartpole).act(obs)[0]
    assert (first == again).all() and (first != greedy).any()


def test_importing_rlpar_imports_neither_torch_nor_the_serving_code():
    code = "import sys, rlpar; assert not {'torch', 'rlpar.serving.policy'} & set(sys.modules), sorted(sys.modules)"
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT, timeout=60)


@pytest.mark.slow
def test_load_policy_reads_runs_as_evaluate_does(cartpole, tmp_path):
    checkpoint = sorted((cartpole / "checkpoints").glob("*.pt"))[-1]
    assert load_policy(cartpole, checkpoint.name).source["checkpoint"] == checkpoint.name
    with pytest.raises(EvaluateError, match="neither a file nor one in"):
        load_policy(cartpole, "checkpoint_99999999.pt")
    copied = shutil.copytree(cartpole, tmp_path / "copied")
    config = yaml.safe_load((copied / "config.yaml").read_text())
    config["env"]["entry_point"] = "tests.policy_runs:NotAnEnv"  # code this user's key did not sign
    (copied / "config.yaml").write_text(yaml.safe_dump(config))
    with pytest.raises(EvaluateError, match=r"nothing was imported.*trust=True"):
        load_policy(copied)
