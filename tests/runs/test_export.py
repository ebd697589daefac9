"""`rlpar export` on real (tiny) runs of the issue's four policies: PPO on Pendulum (whitened
observations, a Gaussian), PPO with an LSTM on CartPole, SAC on Pendulum and DQN on CartPole. An
ONNX file played by onnxruntime in a process that never imports torch (tests/onnx_rollout.py), one
observation at a time with the state carried and zeroed at episode starts, takes the actions
`rlpar.load_policy(RUN_DIR).act(obs, state)` takes, within 1e-4, on 500 steps; a batch too. The
TorchScript file acts the same, and a multi-agent run exports one file per policy."""

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from rlpar import load_policy
from rlpar.serving.export import export_run
from tests.policy_runs import BAR_RUNS, trained_run

ROOT = Path(__file__).resolve().parents[2]
TOLERANCE = 1e-4
STEPS = 500


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    base = tmp_path_factory.mktemp("export")
    return {name: trained_run(base / name, *overrides) for name, (_, overrides) in BAR_RUNS.items()}


def rlpar_command(*args, cwd) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "rlpar", *map(str, args)], cwd=cwd, capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=300)


def played_by_onnxruntime(model: Path, env_id: str, out: Path) -> dict:
    proc = subprocess.run([sys.executable, str(ROOT / "tests" / "onnx_rollout.py"), str(model), env_id, str(STEPS),
                           "3", str(out)], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return dict(np.load(out))


def assert_acts_as_load_policy(policy, played: dict) -> None:
    """Step by step, the state carried and zeroed where an episode starts; then the batch."""
    state = None
    steps = zip(played["observations"], played["actions"], played["starts"], played["states"])
    for step, (obs, action, start, graph_state) in enumerate(steps):
        if start:
            state = None
        expected, state = policy.act(obs, state)
        assert np.abs(np.asarray(expected, np.float64) - action).max() <= TOLERANCE, (step, expected, action)
        if state is not None:  # the state the graph returns is the policy's too
            assert np.abs(state - graph_state).max() <= TOLERANCE, step
    batch = played["batch_actions"]
    expected, _ = policy.act(played["observations"][: len(batch)])
    assert np.abs(np.asarray(expected, np.float64) - batch).max() <= TOLERANCE


@pytest.mark.slow
@pytest.mark.parametrize("name", list(BAR_RUNS))
def test_onnx_acts_as_load_policy_without_torch(runs, name, tmp_path):
    env_id, _ = BAR_RUNS[name]
    model = tmp_path / f"{name}.onnx"
    if name == "ppo_lstm_cartpole":  # the command itself, once
        proc = rlpar_command("export", runs[name], "--format", "onnx", "--out", model, cwd=tmp_path)
        assert proc.returncode == 0, proc.stderr[-3000:]
        assert proc.stdout.strip() == f"exported: {model} (described in {model}.json)"
    else:
        assert export_run(runs[name], "onnx", model) == [model]
    policy = load_policy(runs[name])
    played = played_by_onnxruntime(model, env_id, tmp_path / "played.npz")
    assert played["starts"][1:].any(), "the rollout crossed no episode start"
    assert_acts_as_load_policy(policy, played)

    sidecar = json.loads(Path(f"{model}.json").read_text())
    assert sidecar["source"]["run_dir"] == str(runs[name].resolve())
    assert sidecar["source"]["checkpoint"] == sorted((runs[name] / "checkpoints").glob("*.pt"))[-1].name
    assert sidecar["rlpar_version"] and sidecar["format"] == "onnx"
    assert sidecar["observation_space"] == policy.describe()["observation_space"]
    assert sidecar["action_space"]["type"] == ("Discrete" if "cartpole" in name else "Box")
    recurrent = policy.state_size > 0
    assert [i["name"] for i in sidecar["inputs"]] == ["obs", "state"][: 1 + recurrent]
    assert [o["name"] for o in sidecar["outputs"]] == ["action", "next_state"][: 1 + recurrent]
    assert sidecar["inputs"][0]["shape"] == ["batch", *policy.observation_space.shape]


@pytest.mark.slow
@pytest.mark.parametrize("overrides", [
    ["env.id=rlpar/PixelGridWorld-v0", "total_steps=1024"],  # a CNN actor-critic on uint8 images
    ["env.id=rlpar/MultiDiscreteMatch-v0", "total_steps=1024"],  # factored actions, Tuple observations (rows)
    ["env.entry_point=tests.masked_envs:MaskedMultiChoices", "total_steps=1024"],  # a Dict with an action mask
], ids=["cnn", "factored", "masked"])
def test_every_model_kind_exports_a_graph_that_acts_as_load_policy(overrides, tmp_path):
    import onnxruntime
    from gymnasium.spaces import Box
    from gymnasium.vector.utils import concatenate, create_empty_array

    run_dir = trained_run(tmp_path / "run", *overrides)
    export_run(run_dir, "onnx", tmp_path / "policy.onnx")
    policy = load_policy(run_dir)
    space = policy.observation_space
    observations = [space.sample() for _ in range(16)]  # random masks included
    stacked = concatenate(space, observations, create_empty_array(space, len(observations)))
    graph_input = stacked if isinstance(space, Box) else policy.rows(observations, batch=False)  # rows: the sidecar's
    dtype = np.uint8 if policy.spec.obs_dtype == "uint8" else np.float32
    actions = onnxruntime.InferenceSession(str(tmp_path / "policy.onnx")).run(None, {"obs": graph_input.astype(dtype)})[0]
    expected, _ = policy.act(stacked)
    assert actions.shape == expected.shape and np.abs(actions - expected).max() <= TOLERANCE


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore:`torch.jit.load` is deprecated:DeprecationWarning")
@pytest.mark.parametrize("name", ["ppo_pendulum", "ppo_lstm_cartpole"])
def test_torchscript_acts_as_load_policy(runs, name, tmp_path):
    model = tmp_path / f"{name}.pt"
    export_run(runs[name], "torchscript", model)
    graph = torch.jit.load(str(model))
    policy = load_policy(runs[name])
    rng = np.random.default_rng(0)
    for batch in (1, 5):  # the batch dimension is not fixed by the trace
        obs = np.stack([policy.observation_space.sample() for _ in range(batch)]).astype(np.float32)
        state = rng.normal(size=(batch, policy.state_size)) if policy.state_size else None
        expected, expected_state = policy.act(obs, state)
        with torch.no_grad():
            if state is None:
                action = graph(torch.as_tensor(obs))
            else:
                action, next_state = graph(torch.as_tensor(obs), torch.as_tensor(state, dtype=torch.float32))
                assert np.abs(next_state.numpy() - expected_state).max() <= TOLERANCE
        assert np.abs(action.numpy() - expected).max() <= TOLERANCE


@pytest.mark.slow
def test_a_multi_agent_run_exports_a_file_per_policy_each_acting_as_its_policy(tmp_path):
    """MAPPO on Relay (a scout and two runners: two policies, a centralised critic, agent indices):
    each policy acts on its agent's own observation as the run's acting copy acts on its row."""
    import onnxruntime

    from rlpar.envs.factory import make_env
    from rlpar.runtime.evaluate_run import load_run

    run_dir = trained_run(tmp_path / "run", "env=pettingzoo", "algo=mappo", "env.entry_point=tests.multi_agent_envs:relay",
                          "env.agent_id=true", "total_steps=1000")
    policies = load_policy(run_dir)
    assert sorted(policies) == ["runner", "scout"] and policies["runner"].agents == ("runner_0", "runner_1")

    _, _, target = load_run(run_dir)
    spec = target.policy_spec
    acting = spec.acting_policy()
    acting.set_weights(target.weights)
    team = make_env(target.env_spec)  # every agent's training row: its observation, index and the global state
    rows, _ = team.reset(seed=0)
    rows = team.step(acting.act(acting.normalize(rows), None)[0])[0]  # the scout arrives after the first step
    team.close()
    assert rows.any(axis=1).all()
    expected = acting.act(acting.normalize(rows), None)[0]
    own_widths = {name: policy.observation_space.shape[0] for name, policy in policies.items()}
    files = export_run(run_dir, "onnx", tmp_path / "relay.onnx")
    assert sorted(f.name for f in files) == ["relay.runner.onnx", "relay.scout.onnx"]
    graphs = {name: onnxruntime.InferenceSession(str(tmp_path / f"relay.{name}.onnx")) for name in policies}
    for agent, (row, action) in enumerate(zip(rows, expected)):
        name = spec.policies[spec.policy_of[agent]][0]
        policy, own = policies[name], row[: own_widths[name]]
        reads = policy.spec.actor_inputs  # the agent's observation and index: what its actor reads of the row
        assert (policy.rows([own], batch=False, agent=spec.agents[agent])[0, :reads] == row[:reads]).all()
        assert policy.act(own, agent=spec.agents[agent])[0] == action
        index = policy.agents.index(spec.agents[agent])
        graph_row = np.concatenate([own, np.eye(len(policy.agents))[index]]).astype(np.float32)[None]
        assert graphs[name].run(None, {"obs": graph_row})[0][0] == action
    with pytest.raises(ValueError, match="agent="):
        policies["runner"].act(rows[1][:3])
