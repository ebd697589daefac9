"""A3C: a worker's gradient equals A2C's on the same rollout, the parameter server's staleness
books, parallel=local equal to A2C iteration for iteration, and real asynchrony over worker
processes. (The Ray parameter server, killed mid-run: tests/ray/test_distributed.py.)"""

import os
import signal

import numpy as np
import pytest
import torch

from rlpar.learning.optimization.step import LearningRate
from rlpar.envs.factory import resolve_env_spec
from rlpar.learning.losses.actor_critic import ActorCriticLoss
from rlpar.sampling.gradient_worker import GradientWorker
from rlpar.learning.optimization.parameter_server import ParameterServer
from rlpar.runtime.build import build_trainer
from tests.rollouts import cartpole_rollout
from tests.unit.test_a2c import GAMMA, make_a2c, one_torch_thread, resumed_against_uninterrupted  # noqa: F401 (a fixture)


def test_a_workers_gradient_is_a2cs_on_the_same_rollout():
    """The same weights and rollout: the worker's gradient is the one A2C's update applies (left
    in .grad after its step; no clipping at this max_grad_norm)."""
    policy_spec, batch = cartpole_rollout(make_a2c)
    a2c = make_a2c(policy_spec, value_coef=0.7, entropy_coef=0.02, max_grad_norm=1e9)
    worker = GradientWorker(env_spec=resolve_env_spec(id="CartPole-v1"), policy_spec=policy_spec, num_envs=1,
                            rollout_length=4, seed=0, objective=ActorCriticLoss(gamma=GAMMA, value_coef=0.7,
                                                                                entropy_coef=0.02))
    try:
        worker.adopt(a2c.get_weights(), version=0)
        gradients, stats = worker.gradients(batch)
    finally:
        worker.close()
    update = a2c.update(batch)
    for gradient, parameter in zip(gradients, a2c.parameters, strict=True):
        np.testing.assert_allclose(gradient, parameter.grad.numpy(), rtol=1e-6, atol=1e-8)
    assert sum(np.abs(g).sum() for g in gradients) > 0
    assert stats["loss_policy"] == pytest.approx(update["loss_policy"], rel=1e-6)
    assert stats["explained_variance"] == pytest.approx(update["explained_variance"], rel=1e-6)


def test_the_parameter_server_counts_how_stale_each_gradient_is():
    policy_spec, _ = cartpole_rollout(make_a2c)
    server = ParameterServer(policy_spec=policy_spec, optimizer=dict(optimizer="adam", lr=1e-3, optimizer_eps=1e-5),
                             learning_rate=LearningRate(1e-3), total_steps=1000, max_grad_norm=0.5,
                             max_consecutive_nonfinite=3, seed=0)
    weights, version = server.weights()
    gradients = [np.ones_like(w) for w in (p.detach().numpy() for p in server.parameters)]
    # three workers start from version 0; a fourth from the weights the first got back
    answers = [server.apply(gradients, 0, 10) for _ in range(3)]
    assert [a["staleness"] for a in answers] == [0, 1, 2]
    assert server.apply(gradients, answers[0]["version"], 10)["staleness"] == 2  # versions 2 and 3 came between
    assert (server.version, server.env_steps) == (4, 40)
    changed = {k: not np.array_equal(v, weights[k]) for k, v in server.weights()[0].items()}
    assert all(changed[k] for k in changed if "weight" in k or "bias" in k)
    restarted = ParameterServer(policy_spec=policy_spec, optimizer=dict(optimizer="adam", lr=1e-3, optimizer_eps=1e-5),
                                learning_rate=LearningRate(1e-3), total_steps=1000, max_grad_norm=0.5,
                                max_consecutive_nonfinite=3, seed=1, state=server.state())
    for a, b in zip(server.weights()[0].values(), restarted.weights()[0].values()):
        np.testing.assert_array_equal(a, b)
    assert server.apply(gradients, 4, 10)["weights"].keys() == restarted.apply(gradients, 4, 10)["weights"].keys()


def metric_rows(trainer, iterations: int) -> list[dict]:
    return [trainer.train() for _ in range(iterations)]


SHARED = ("seed=3", "workers=1", "envs_per_worker=8", "algo.rollout_length=8", "algo.lr=1e-3", "algo.anneal_lr=true",
          "algo.gamma=0.98", "algo.entropy_coef=0.0", "algo.value_coef=1.0", "model.normalize_obs=false",
          "total_steps=100000", "checkpoint.every=0")


@pytest.mark.slow
def test_local_a3c_is_a2c_iteration_for_iteration(make_cfg, tmp_path):
    """parallel=local: one worker, one gradient per iteration, applied before the next rollout."""
    rows = {}
    for algo in ("a2c", "a3c"):
        extra = ("algo.normalize_rewards=false",) if algo == "a2c" else ()
        trainer = build_trainer(make_cfg(f"algo={algo}", *SHARED, *extra, run_dir=tmp_path / algo))
        try:
            rows[algo] = metric_rows(trainer, 40)
        finally:
            trainer.close()
    keys = ("env_steps", "episodes", "episode_return_mean", "loss_policy", "loss_value", "loss_entropy",
            "explained_variance", "lr", "policy_version")
    a2c, a3c = ([{k: row.get(k) for k in keys} for row in rows[name]] for name in ("a2c", "a3c"))
    assert a2c[-1]["episodes"] > 10 and a2c[-1]["policy_version"] == 40
    assert a3c == a2c
    assert {row["gradient_staleness_max"] for row in rows["a3c"]} == {0}


@pytest.mark.slow
def test_worker_processes_update_the_shared_parameters_asynchronously(make_cfg, tmp_path):
    """parallel=multiprocess: Hogwild. The workers apply their gradients to the learner's own
    model, in shared memory; with 3 workers some gradients were computed on weights others had
    already changed."""
    trainer = build_trainer(make_cfg("algo=a3c", "parallel=multiprocess", "workers=3", "envs_per_worker=1",
                                     "checkpoint.every=0", run_dir=tmp_path / "mp"))
    try:
        initial = [p.detach().clone() for p in trainer.algorithm.model.parameters()]
        rows = metric_rows(trainer, 60)
        writers = [process.pid for process in trainer.sampler.processes]
        for pid in writers:  # Hogwild writes take no lock: pause the writers while reading
            os.kill(pid, signal.SIGSTOP)
        learned = [p.detach().clone() for p in trainer.algorithm.model.parameters()]
        evaluated_weights = trainer.algorithm.policy_weights()
        for pid in writers:
            os.kill(pid, signal.SIGCONT)
        evaluation = trainer.evaluate(num_episodes=2)  # the shared weights, not what workers are sent
    finally:
        trainer.close()
    for (name, _), value in zip(trainer.algorithm.model.named_parameters(), learned):
        np.testing.assert_array_equal(evaluated_weights[name], value.numpy())
    assert evaluation["eval_episodes"] == 2 and evaluation["eval_return_min"] >= 8
    applied = sum(row["gradients_applied"] for row in rows)
    # The version runs ahead by gradients of rollouts in flight, and behind by increments lost
    # to Hogwild's unlocked writes (rlpar/learning/optimization/hogwild.py): a few either way.
    assert applied >= 60 and abs(rows[-1]["policy_version"] - applied) <= 3
    assert max(row["gradient_staleness_max"] for row in rows if "gradient_staleness_max" in row) >= 1
    assert all(not bool((a == b).all()) for a, b in zip(initial, learned))
    assert rows[-1]["episodes"] > 5 and not any(k.startswith("policy_lag") for k in rows[-1])


@pytest.mark.slow
def test_a_hogwild_checkpoint_of_the_earlier_layout_still_resumes(make_cfg, tmp_path):
    """Multiprocess A3C checkpoints once held the model, optimiser and shared counters at the top
    level; such a checkpoint loads into the parameter server as it was."""
    overrides = ("algo=a3c", "parallel=multiprocess", "workers=2", "envs_per_worker=1", "checkpoint.every=0")
    trainer = build_trainer(make_cfg(*overrides, run_dir=tmp_path / "first"))
    try:
        metric_rows(trainer, 3)
        new = trainer.algorithm.state_dict()
    finally:
        trainer.close()
    server = new["server"]
    earlier = {"model": server["model"], "optimizer": server["optimizer"], "version": new["version"],
               "steps_seen": new["steps_seen"], "shared_counters": torch.tensor([server["version"], server["env_steps"]])}
    resumed = build_trainer(make_cfg(*overrides, run_dir=tmp_path / "second"))
    try:
        resumed.algorithm.load_state_dict(earlier)
        loaded = resumed.algorithm.state_dict()
    finally:
        resumed.close()
    assert (loaded["steps_seen"], loaded["server"]["version"], loaded["server"]["env_steps"]) == (
        new["steps_seen"], server["version"], server["env_steps"])
    for name, value in server["model"].items():
        torch.testing.assert_close(loaded["server"]["model"][name], value, rtol=0, atol=0)


def apply_in_a_child(shared, gradients, done):
    done.put(shared.apply(gradients, version=0, env_steps=7))


@pytest.mark.slow
def test_a_gradient_applied_in_another_process_changes_the_learners_model():
    """SharedParameters crosses a process boundary as handles: the child's RMSprop step lands in
    the parent's model and optimiser statistics, and the counters count it."""
    import multiprocessing

    from rlpar.learning.optimization.hogwild import SharedParameters
    from rlpar.learning.optimization.optim import build_optimizer

    policy_spec, _ = cartpole_rollout(make_a2c)
    model = policy_spec.build()
    optimizer = build_optimizer(list(model.parameters()), optimizer="rmsprop", lr=0.01, optimizer_eps=1e-5)
    shared = SharedParameters(model=model, optimizer=optimizer, learning_rate=LearningRate(0.01), total_steps=100,
                              max_grad_norm=1e9, max_consecutive_nonfinite=3)
    before = [p.detach().clone() for p in model.parameters()]
    gradients = [np.full(tuple(p.shape), 0.5, np.float32) for p in model.parameters()]
    context = multiprocessing.get_context("spawn")
    done = context.Queue()
    child = context.Process(target=apply_in_a_child, args=(shared, gradients, done))
    child.start()
    answer = done.get(timeout=60)
    child.join(30)
    assert child.exitcode == 0 and answer["staleness"] == 0
    # RMSprop's first step: square_avg = 0.01 g^2, delta = -lr g / (sqrt(0.01 g^2) + eps) ~ -0.1
    for old, new in zip(before, model.parameters()):
        np.testing.assert_allclose((new.detach() - old).numpy(), -0.01 * 0.5 / (0.05 + 1e-5), rtol=1e-4)
    for p in model.parameters():  # the statistics the next step builds on are the parent's too
        np.testing.assert_allclose(optimizer.state[p]["square_avg"].numpy(), 0.01 * 0.25, rtol=1e-5)
    assert shared.counters.tolist() == [1, 7]


def test_resume_continues_exactly(make_cfg, tmp_path):
    """The parameter server's weights and RMSprop state go through a checkpoint and back."""
    after, resumed = resumed_against_uninterrupted(make_cfg, tmp_path, "a3c")
    assert resumed == after and after[-1]["loss_policy"] != after[0]["loss_policy"]


def q_models(obs_dim: int = 2):
    """An online and a target Q-network whose target answers [2, 5] for every observation."""
    from rlpar.envs.spaces import ActionInfo
    from rlpar.models.q_spec import QNetworkSpec

    spec = QNetworkSpec(obs_dim=obs_dim, action=ActionInfo(discrete=True, size=2), hidden_sizes=(4,))
    online, target = spec.build(), spec.build()
    with torch.no_grad():
        for name, parameter in target.named_parameters():
            parameter.zero_()
            if name == "advantage.bias":
                parameter.copy_(torch.tensor([2.0, 5.0]))
    return spec, {"model": online, "target": target}


def test_nstep_q_targets_by_hand():
    """Returns to the rollout's end, bootstrapped from max_a Q_target = 5; a termination cuts
    the sum, a truncation bootstraps from the real final observation, an autoreset step is
    no transition."""
    from rlpar.learning.losses.nstep_q import NStepQLoss
    from rlpar.sampling.batch import Batch

    _, models = q_models()
    g = 0.9
    T, N = 4, 3
    terminated = np.zeros((T, N), bool)
    truncated = np.zeros((T, N), bool)
    valid = np.ones((T, N), bool)
    terminated[1, 1] = True   # env 1: episode ends at step 1; step 2 is its autoreset step
    valid[2, 1] = False
    truncated[2, 2] = True    # env 2: cut off at step 2; step 3 autoreset
    valid[3, 2] = False
    rewards = np.ones((T, N), np.float32)
    batch = Batch(obs=np.zeros((T, N, 2), np.float32), actions=np.zeros((T, N), np.int64),
                  logp=np.zeros((T, N), np.float32), values=np.zeros((T, N), np.float32), rewards=rewards,
                  terminated=terminated, truncated=truncated, valid=valid, bootstrap_value=np.zeros(N, np.float32),
                  last_obs=np.zeros((N, 2), np.float32), env_ids=np.arange(N))
    returns = NStepQLoss(gamma=g).targets(models, batch, rewards)
    v = 5.0
    expected_env0 = [1 + g + g**2 + g**3 + g**4 * v, 1 + g + g**2 + g**3 * v, 1 + g + g**2 * v, 1 + g * v]
    np.testing.assert_allclose(returns[:, 0], expected_env0, rtol=1e-6)
    np.testing.assert_allclose(returns[:2, 1], [1 + g, 1], rtol=1e-6)            # terminated at step 1
    np.testing.assert_allclose(returns[3, 1], 1 + g * v, rtol=1e-6)               # a new episode
    np.testing.assert_allclose(returns[:3, 2], [1 + g + g**2 + g**3 * v, 1 + g + g**2 * v, 1 + g * v], rtol=1e-6)
    np.testing.assert_allclose(NStepQLoss(gamma=g, n_steps=1).targets(models, batch, rewards)[0, 0], 1 + g * v)


def test_the_parameter_servers_target_network_is_a_copy_every_n_gradients():
    spec, _ = q_models()
    server = ParameterServer(policy_spec=spec, optimizer=dict(optimizer="adam", lr=0.1, optimizer_eps=1e-5),
                             learning_rate=LearningRate(0.1), total_steps=1000, max_grad_norm=10.0,
                             max_consecutive_nonfinite=3, seed=0, target_update_every=2)
    initial, _ = server.weights()
    gradients = [np.ones(tuple(p.shape), np.float32) for p in server.parameters]
    first = server.apply(gradients, 0, 5)["weights"]
    second = server.apply(gradients, 1, 5)["weights"]
    for name, _ in server.model.named_parameters():
        np.testing.assert_array_equal(first[f"target.{name}"], initial[name])  # not yet refreshed
        assert not np.array_equal(first[name], initial[name])
        np.testing.assert_array_equal(second[f"target.{name}"], second[name])  # refreshed at version 2


def test_async_dqn_on_shared_memory_workers(make_cfg, tmp_path):
    """algo=async_dqn, parallel=multiprocess: n-step Q gradients from each worker on the shared
    Q-network; each environment keeps its own ε; the target network is refreshed on schedule."""
    trainer = build_trainer(make_cfg("algo=async_dqn", "parallel=multiprocess", "workers=2", "envs_per_worker=2",
                                     "algo.target_update_every=10", "checkpoint.every=0", run_dir=tmp_path / "q"))
    try:
        rows = metric_rows(trainer, 40)
        shared = trainer.algorithm.server.instance  # the shared parameters, which the workers hold too
        target = {k: v.clone() for k, v in shared.target.model.state_dict().items()}
        version = shared.version
        online = {k: v.clone() for k, v in shared.model.state_dict().items()}
    finally:
        trainer.close()
    assert sum(row["gradients_applied"] for row in rows) >= 40 and "loss_q" in rows[-1]
    assert rows[-1]["epsilon"] == pytest.approx(np.median([0.4 ** (1 + 7 * i / 3) for i in range(4)]))
    assert any(row["episode_return_mean_all"] is not None for row in rows)  # (None where no episode ended)
    # the target is the model of the last multiple of 10, not the newest one (unless just refreshed;
    # Hogwild, no locks: the other worker's update may land between the refresh's count and its copy)
    assert version >= 10 and (version % 10 < 2 or any(not torch.equal(target[k], online[k]) for k in target))
