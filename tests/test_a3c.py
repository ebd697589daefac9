"""A3C: a worker's gradient equals A2C's on the same rollout, the parameter server's staleness
books, parallel=local equal to A2C iteration for iteration, and real asynchrony over worker
processes. (The Ray parameter server, killed mid-run: tests/test_distributed.py.)"""

import numpy as np
import pytest

from rlpar.algos.base import LearningRate
from rlpar.envs.factory import resolve_env_spec
from rlpar.learning.actor_critic import ActorCriticLoss
from rlpar.learning.gradient_worker import GradientWorker
from rlpar.learning.parameter_server import ParameterServer
from rlpar.runtime.build import build_trainer
from tests.rollouts import cartpole_rollout
from tests.test_a2c import GAMMA, make_a2c, one_torch_thread  # noqa: F401 (an autouse fixture)


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


def test_worker_processes_send_gradients_asynchronously(make_cfg, tmp_path):
    """parallel=multiprocess: gradients come back with the rollouts and are applied as they
    arrive; with 3 workers some were computed on weights others had already changed."""
    trainer = build_trainer(make_cfg("algo=a3c", "parallel=multiprocess", "workers=3", "envs_per_worker=1",
                                     "checkpoint.every=0", run_dir=tmp_path / "mp"))
    try:
        rows = metric_rows(trainer, 60)
    finally:
        trainer.close()
    applied = sum(row["gradients_applied"] for row in rows)
    assert rows[-1]["policy_version"] == applied and applied >= 60
    assert max(row["gradient_staleness_max"] for row in rows if "gradient_staleness_max" in row) >= 1
    assert rows[-1]["episodes"] > 5


def test_resume_continues_exactly(make_cfg, tmp_path):
    """The parameter server's weights and RMSprop state go through a checkpoint and back."""
    common = ("algo=a3c", "checkpoint.every=0")
    trainer = build_trainer(make_cfg(*common, run_dir=tmp_path / "a"))
    try:
        metric_rows(trainer, 4)
        path = trainer.save()
        after = metric_rows(trainer, 3)
    finally:
        trainer.close()
    resumed = build_trainer(make_cfg(*common, "seed=7", run_dir=tmp_path / "b"))
    try:
        resumed.restore(path)
        again = metric_rows(resumed, 3)
    finally:
        resumed.close()
    keys = ("env_steps", "loss_policy", "loss_value", "loss_entropy", "explained_variance", "policy_version", "lr")
    assert [{k: r[k] for k in keys} for r in again] == [{k: r[k] for k in keys} for r in after]
