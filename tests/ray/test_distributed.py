"""The Ray sampler on a real two-node cluster on 127.0.0.1 (one cluster for the whole module)."""

import json
import os
import subprocess
import sys
import time

import numpy as np
import pytest
import ray

from tests.ray_helpers import ROOT, connected_cluster
from tests.unit.test_samplers import assert_first_iteration_matches_local

pytestmark = [pytest.mark.slow, pytest.mark.ray]  # each test starts Ray (quick tier: -m 'not slow and not ray')


@pytest.fixture(scope="module")
def cluster():
    with connected_cluster(nodes=2, cpus_per_node=1) as cluster:
        yield cluster


def test_cluster_has_two_nodes_on_loopback(cluster):
    nodes = [n for n in ray.nodes() if n["Alive"]]
    assert len(nodes) == 2
    assert {n["NodeManagerAddress"] for n in nodes} == {"127.0.0.1"}


def test_distributed_first_batch_equals_local_and_spreads_over_nodes(cluster, make_cfg, tmp_path):
    dist_metrics = assert_first_iteration_matches_local(make_cfg, tmp_path, ("algo.rollout_length=32",), "distributed")
    assert dist_metrics["num_nodes"] == 2
    assert dist_metrics["live_workers"] == 4
    assert ray.is_initialized()  # a cluster rlpar joined is not shut down by rlpar


def test_distributed_non_blocking_bounds_policy_lag(cluster, make_cfg, tmp_path):
    from rlpar.runtime.build import build_trainer

    trainer = build_trainer(
        make_cfg("parallel=distributed", "parallel.sync_mode=non_blocking", "workers=4", "envs_per_worker=2", run_dir=tmp_path / "nb")
    )
    try:
        rows = [trainer.train() for _ in range(10)]
    finally:
        trainer.close()
    assert all(0 <= r["policy_lag_min"] <= r["policy_lag_max"] <= 1 for r in rows)
    assert max(r["policy_lag_max"] for r in rows) == 1
    # each round takes whole worker rollouts (2 environments x 32 steps), at least one of them
    steps = [0] + [r["env_steps"] for r in rows]
    assert all(b - a > 0 and (b - a) % 64 == 0 for a, b in zip(steps, steps[1:])), steps


def test_cli_joins_existing_cluster_and_reports_two_nodes(cluster, tmp_path):
    run_dir = tmp_path / "cli"
    proc = subprocess.run(
        [
            sys.executable,
            "main.py",
            "parallel=distributed",
            "hardware=cluster",
            f"ray.address={cluster.address}",
            "workers=4",
            "total_steps=2048",
            "progress=false",
            f"hydra.run.dir={run_dir}",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=240,
        env={**os.environ, "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0"},
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = [json.loads(l) for l in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert rows[-1]["env_steps"] >= 2048
    assert {r["num_nodes"] for r in rows} == {2}
    assert np.isfinite(rows[-1]["loss_value"])


def metrics_rows(run_dir):
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


@pytest.mark.parametrize(("common", "iterations"), [
    # PPO's CartPole preset (512 steps an iteration): episodes of many lengths end in one iteration.
    (("env=cartpole", "seed=3"), 8),
    # A2C's preset (64 steps an iteration), many more iterations and episodes.
    (("algo=a2c", "env=cartpole", "seed=3"), 30),
    # PPO's baseline on a Box-observation task: observations and rewards normalised (auto).
    (("env.id=Acrobot-v1", "algo.rollout_length=64", "total_steps=8192"), 16),
    # A recurrent policy: every environment's LSTM state kept by whoever acts for it.
    (("env=cartpole", "seed=3", "model.recurrent=lstm", "model.recurrent_size=16"), 8),
    # IPPO on mpe2's simple_spread: 3 agents' rows per environment, central inference batching them all.
    (("env=pettingzoo", "env.id=mpe2.simple_spread_v3", "algo=ippo", "algo.rollout_length=25", "seed=3"), 4),
    # APPO whose workers get the weights after the first of two epochs (algo.publish_after_epochs):
    # the next batch is acted with those, wherever it is sampled.
    (("algo=appo", "env=cartpole", "seed=3", "algo.minibatch_size=64", "algo.epochs=2", "algo.reuse_per_batch=1",
      "algo.publish_after_epochs=1"), 8),
    # SAC: the learner's replay, uniform random actions, then squashed-Gaussian draws from per-environment noise.
    (("algo=sac", "env=pendulum", "env.max_episode_steps=50", "seed=3", "algo.rollout_length=8", "algo.learning_starts=128", "algo.batch_size=32",
      "model.hidden_sizes=[32,32]"), 12),
])
def test_blocking_metrics_identical_on_every_sampler(cluster, make_cfg, tmp_path, common, iterations):
    """Same seed, 8 environments in all, sync_mode=blocking: every row of metrics.jsonl, read back
    from disk, is the same in parallel=local, multiprocess and distributed."""
    from rlpar.runtime.build import build_trainer

    central = "parallel.inference=central"
    layouts = {"local": ("workers=1", "envs_per_worker=8"),
               "multiprocess": ("parallel=multiprocess", "workers=4", "envs_per_worker=2"),
               "distributed": ("parallel=distributed", "workers=2", "envs_per_worker=4"),
               "multiprocess-central": ("parallel=multiprocess", "workers=2", "envs_per_worker=4", central),
               "distributed-central": ("parallel=distributed", "workers=4", "envs_per_worker=2", central)}
    rows = {}
    for name, layout in layouts.items():
        run_dir = tmp_path / name
        trainer = build_trainer(make_cfg(*common, *layout, "parallel.sync_mode=blocking", "checkpoint.every=0",
                                         run_dir=run_dir))
        try:
            for _ in range(iterations):
                trainer.train()
        finally:
            trainer.close()
        keys = ("iteration", "env_steps", "episodes", "episode_return_mean", "loss_policy", "loss_value",
                "team_return_mean", "agent_return_mean", "shared/loss_policy", "shared/loss_value", "loss_q", "loss_actor")
        rows[name] = [{k: row.get(k) for k in keys} for row in metrics_rows(run_dir)]
    assert len(rows["local"]) == iterations and rows["local"][-1]["episodes"] > 5
    for name in layouts:
        assert rows[name] == rows["local"], name


def test_appo_runners_sample_the_next_batch_during_the_later_epochs(cluster, make_cfg, tmp_path):
    """algo.publish_after_epochs: when an update ends, the runners already hold the next round's
    request, made with the weights after the first epoch (which differ from the update's last),
    and the next iteration's batch is that round's; a multiprocess pool, whose batch is its shared
    memory, starts the round only when asked for it."""
    from rlpar.runtime.build import build_trainer

    common = ("algo=appo", "env=cartpole", "workers=2", "envs_per_worker=4", "algo.minibatch_size=64",
              "algo.epochs=3", "algo.reuse_per_batch=1", "algo.publish_after_epochs=1", "checkpoint.every=0")
    trainer = build_trainer(make_cfg(*common, "parallel=distributed", run_dir=tmp_path / "d"))
    try:
        for _ in range(3):
            row = trainer.train()
            sampler, algorithm = trainer.sampler, trainer.algorithm
            assert sorted(sampler.in_flight) == [0, 1]  # both runners sample while nothing waits for them
            assert sampler.sent_version == [row["policy_version"]] * 2
            begun, now = algorithm.begun_weights, algorithm.get_weights()
            assert max(float(np.abs(begun[k] - now[k]).max()) for k in now) > 0  # two more epochs since
            assert row["gradient_steps"] % 3 == 0 and row["gradient_steps"] >= 3 * 7  # 3 epochs of 64-step minibatches
    finally:
        trainer.close()
    trainer = build_trainer(make_cfg(*common, "parallel=multiprocess", run_dir=tmp_path / "m"))
    try:
        trainer.train()
        assert not trainer.sampler.in_flight and trainer.algorithm.begun_weights is not None
    finally:
        trainer.close()


@pytest.mark.parametrize("algo", ["ppo", "dqn"])
def test_distributed_central_inference_first_batch_is_local_and_served_on_the_learners_node(cluster, make_cfg,
                                                                                          tmp_path, algo):
    from rlpar.runtime.build import build_trainer
    from tests.unit.test_samplers import first_batch

    common = (f"algo={algo}", "algo.rollout_length=16", "parallel.inference=central", "parallel.sync_mode=blocking")
    local, _ = first_batch(make_cfg, tmp_path, "local", *common, "workers=1", "envs_per_worker=8")
    trainer = build_trainer(make_cfg(*common, "parallel=distributed", "workers=4", "envs_per_worker=2",
                                     run_dir=tmp_path / "central"))
    try:
        algorithm = trainer.algorithm
        central = algorithm.sampler.sample(algorithm.get_weights(), algorithm.version)
        metrics = algorithm.sampler.metrics()
        server_node, server_pid = ray.get(algorithm.sampler.inference.location.remote())
        assert server_node == ray.get_runtime_context().get_node_id()
        assert server_pid not in algorithm.sampler.worker_pids()
        assert algorithm.sampler.num_nodes() == 2  # the runners still spread over both nodes
    finally:
        trainer.close()
    for field in ("obs", "actions", "logp", "values", "rewards", "valid", "bootstrap_value", "last_obs"):
        np.testing.assert_array_equal(getattr(local, field), getattr(central, field), err_msg=field)
    # 16 steps and a bootstrap for 8 environments, in batches of one to four runners' requests
    assert metrics["inference_batches"] * metrics["inference_batch_mean"] == pytest.approx(17 * 8)
    assert 17 <= metrics["inference_batches"] <= 4 * 17


def test_distributed_central_inference_keeps_recurrent_states_as_workers_do(cluster, make_cfg, tmp_path):
    """A recurrent policy served by the InferenceServer, which keeps every environment's state by
    its row of the run: the batches (stored states included) of one local worker acting itself."""
    from tests.unit.test_central_inference import assert_same_batches, recurrent_batches

    local, _ = recurrent_batches(make_cfg, tmp_path, "local", "workers=1", "envs_per_worker=6")
    central, metrics = recurrent_batches(make_cfg, tmp_path, "central", "parallel=distributed", "workers=3",
                                         "envs_per_worker=2", "parallel.inference=central")
    assert_same_batches(local, central)
    assert metrics["inference_batches"] > 0


@pytest.mark.parametrize("common", [("algo=apex",), ("algo=apex_sac", "env=pendulum", "model.hidden_sizes=[32,32]")])
def test_apex_shards_on_both_nodes_and_a_killed_shard_is_restarted(cluster, make_cfg, tmp_path, common, caplog):
    """Ape-X (and the Ape-X-style SAC, algo=apex_sac) on the two-node cluster: actors write to two
    ReplayShard actors, one per node; the learner samples them. SIGKILL one shard's process: it
    is started again (empty), counted, said in one console line, and training goes on learning."""
    from rlpar.runtime.build import build_trainer

    trainer = build_trainer(make_cfg(*common, "parallel=distributed", "workers=4", "envs_per_worker=1",
                                     "algo.learning_starts=256", "algo.replay.num_shards=2", "algo.batch_size=64",
                                     "algo.rollout_length=32", run_dir=tmp_path / "apex"))
    try:
        algorithm = trainer.algorithm
        before = [trainer.train() for _ in range(15)]
        locations = [shard.call("location") for shard in algorithm.shards]
        assert len({node for node, _ in locations}) == 2  # one shard on each node
        os.kill(locations[0][1], 9)
        after = [trainer.train() for _ in range(25)]
        new_location = algorithm.shards[0].call("location")
    finally:
        trainer.close()
    assert before[-1]["replay_shards"] == 2 and before[-1]["replay_shard_restarts"] == 0
    assert before[-1]["replay_samples"] > 0 and before[-1]["replay_inserts"] > 256
    assert after[-1]["replay_shard_restarts"] >= 1 and new_location[1] != locations[0][1]
    said = [r.getMessage() for r in caplog.records if r.levelname == "WARNING" and "replay shard" in r.getMessage()]
    assert said[0] == "replay shard 0 of 2 was lost; restarted empty: what it held is gone (restart 1)", said
    assert after[-1]["env_steps"] > before[-1]["env_steps"]
    assert after[-1]["replay_samples"] > before[-1]["replay_samples"] + 10 * 64  # still learning
    assert after[-1]["replay_size"] > 0


def test_an_actor_write_the_shards_limiter_refuses_waits_until_the_learner_samples(cluster):
    """A ReplayShard answers a write its rate limiter refuses with None at once (its requests
    never queue behind a waiting write); the Ape-X actor offers the write again until it is
    taken, and reports the time it waited."""
    import threading

    from rlpar.envs.factory import resolve_env_spec
    from rlpar.models.q_spec import QNetworkSpec
    from rlpar.sampling.prioritizing_worker import PrioritizingWorker
    from rlpar.replay.shard import ReplayShard
    from rlpar.runtime.build import probe_policy_spec
    from rlpar.sampling.services import ActorAddress

    # min_size 16, band [16 - 16, 16 + 16] in sampled items, 1 per insert
    limiter = dict(min_size=16, samples_per_insert=1.0, tolerance=16.0, insert_batch=16, sample_batch=16)
    shard = ray.remote(ReplayShard).options(num_cpus=0).remote(
        capacity=128, obs_dim=4, alpha=0.6, beta_start=0.4, beta_end=1.0, beta_steps=10, seed=0, rate_limiter=limiter)
    spec, _ = probe_policy_spec(resolve_env_spec(id="CartPole-v1"), QNetworkSpec)
    actor = PrioritizingWorker(env_spec=resolve_env_spec(id="CartPole-v1"), policy_spec=spec, num_envs=1,
                               rollout_length=8, seed=0, n_step=1, gamma=0.99)
    obs = np.ones((16, 4), np.float32)
    transitions = {"obs": obs, "actions": np.zeros(16, np.int64), "rewards": np.ones(16, np.float32),
                   "next_obs": obs, "discounts": np.ones(16, np.float32)}
    try:
        assert ray.get([shard.add.remote(transitions, np.ones(16)) for _ in range(2)]) == [16, 16]  # diff 32: the top
        assert ray.get(shard.add.remote(transitions, np.ones(16))) is None  # diff would be 48
        actor.shards = [ActorAddress(shard, generation=0)]
        sampled = threading.Event()

        def learner_samples():
            ray.get(shard.sample.remote(16))  # diff 16: room for one more
            sampled.set()

        learner = threading.Timer(0.5, learner_samples)
        learner.start()
        actor.write(transitions, np.ones(16))
        actor.write(transitions, np.ones(16))
        assert len(actor.writes_in_flight) == 2  # neither waited: two writes may be in flight unanswered
        actor.write(transitions, np.ones(16))  # the third waits for the first, refused until the learner samples
        # Read at the shard as the write returns: it had sampled. (The learner's thread itself may
        # hear that its sample was taken after the actor's write was: checked after it ends.)
        stats = ray.get(shard.stats.remote())
        assert (stats["size"], stats["inserted"], stats["sampled"]) == (48, 48, 16)
        learner.join()
        assert sampled.is_set()
    finally:
        actor.close()
        ray.kill(shard)


def test_a3c_parameter_server_is_an_actor_and_a_killed_one_is_restarted(cluster, make_cfg, tmp_path):
    """parallel=distributed: workers apply their gradients on the `ParameterServer` actor
    themselves. SIGKILL its process: the learner restarts it from the newest state it holds,
    counts the restart, and the workers go on with the new one."""
    from rlpar.runtime.build import build_trainer

    trainer = build_trainer(make_cfg("algo=a3c", "parallel=distributed", "workers=3", "envs_per_worker=1",
                                     "algo.server_sync_interval=5", "checkpoint.every=0", run_dir=tmp_path / "a3c"))
    try:
        algorithm = trainer.algorithm
        before = [trainer.train() for _ in range(30)]
        held_version = algorithm.server.kept["version"]
        server_pid = ray.get(algorithm.server.actor.__ray_call__.remote(lambda server: os.getpid()))
        os.kill(server_pid, 9)
        after = [trainer.train() for _ in range(40)]
        new_pid = ray.get(algorithm.server.actor.__ray_call__.remote(lambda server: os.getpid()))
        served = algorithm.server.call("weights")[0]
        evaluated_weights = algorithm.policy_weights()
        evaluation = trainer.evaluate(num_episodes=2)  # the server's weights, not its handle
    finally:
        trainer.close()
    stale = [row["gradient_staleness_max"] for row in before if "gradient_staleness_max" in row]
    assert before[-1]["parameter_server_restarts"] == 0 and max(stale) >= 1  # asynchronous
    assert sum(row["gradients_applied"] for row in before) >= 30
    assert after[-1]["parameter_server_restarts"] == 1 and new_pid != server_pid
    assert held_version > 0 and after[-1]["policy_version"] > held_version + 20  # learning went on
    assert sum(row["gradients_applied"] for row in after[-10:]) >= 10
    assert evaluated_weights.keys() == served.keys() and evaluation["eval_return_min"] >= 8


def test_a_killed_inference_server_is_restarted_and_the_run_goes_on(cluster, make_cfg, tmp_path):
    """SIGKILL `ray::InferenceServer` between rounds and in the middle of one: Ray restarts it, the
    next round gives it the weights again, and runners caught waiting on it are replaced."""
    import threading

    from rlpar.runtime.build import build_trainer

    trainer = build_trainer(make_cfg("parallel=distributed", "parallel.inference=central", "workers=2",
                                     "envs_per_worker=2", "algo.rollout_length=64", "algo.minibatch_size=64",
                                     "checkpoint.every=0", run_dir=tmp_path / "inf"))
    server = trainer.sampler.inference
    try:
        trainer.train()
        first_pid = ray.get(server.location.remote())[1]
        os.kill(first_pid, 9)
        between = [trainer.train() for _ in range(2)]
        second_pid = ray.get(server.location.remote())[1]
        killer = threading.Timer(0.05, os.kill, (second_pid, 9))  # while the runners wait on it
        killer.start()
        during = [trainer.train()]
        deadline = time.monotonic() + 60  # replacement runners join once they are up
        while during[-1]["batches_this_iter"] < 2 and time.monotonic() < deadline:
            during.append(trainer.train())
        killer.join()
        third_pid = ray.get(server.location.remote())[1]
    finally:
        trainer.close()
    assert len({first_pid, second_pid, third_pid}) == 3
    rows = between + during
    summary = [(r["live_workers"], r["worker_restarts"], r["batches_this_iter"], r["inference_batches"]) for r in rows]
    assert all(np.isfinite(row["loss_value"]) for row in rows), summary
    assert between[-1]["worker_restarts"] == 0, summary  # killed between rounds: no runner noticed
    assert 1 <= during[-1]["worker_restarts"] <= 2, summary  # killed mid-round: runners waiting on it are replaced
    assert during[-1]["live_workers"] == 2 and during[-1]["batches_this_iter"] == 2, summary
    assert during[-1]["inference_batches"] >= 65, summary  # the restarted server answers every request


def test_a_distributed_search_trials_env_runners_live_in_its_placement_group(cluster, tmp_path):
    """search= on a user's cluster (hardware=cluster): each trial reserves its learner and one
    bundle per worker, and its env runners are scheduled into that placement group."""
    run_dir = tmp_path / "search"
    proc = subprocess.run(
        [sys.executable, "main.py", "search=asha", "search.num_samples=2", "parallel=distributed", "workers=2",
         "envs_per_worker=2", "hardware=cluster", f"ray.address={cluster.address}", "total_steps=1024",
         "search.scheduler.grace_period=512", "algo.rollout_length=32", "algo.minibatch_size=64",
         f"run_dir={run_dir}"],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    histories = [[json.loads(line) for line in path.read_text().splitlines()]
                 for path in sorted((run_dir / "trials").glob("*/metrics.jsonl"))]
    assert len(histories) == 2
    for history in histories:
        assert [row["runners_in_placement_group"] for row in history] == [2] * len(history)
        assert all(row["live_workers"] == 2 for row in history)
    assert ray.is_initialized()  # the search only disconnected from the user's cluster


def test_grid_world_is_learned_through_the_cnn_on_ray_actors(cluster, make_cfg, tmp_path):
    """The pixel grid world (uint8 images end to end, small CNN) learned by Ray actors on two nodes."""
    from rlpar.runtime.build import build_trainer
    from tests.learning.test_space_learning import GRID, GRID_THRESHOLD, first_reached

    run_dir = tmp_path / "grid"
    trainer = build_trainer(make_cfg(f"env.id={GRID}", "parallel=distributed", "workers=2", "envs_per_worker=4",
                                     "total_steps=60000", "checkpoint.every=0", run_dir=run_dir))
    try:
        assert trainer.algorithm.policy_spec.chosen_encoder == "small"
        final = trainer.fit()
    finally:
        trainer.close()
    assert final["num_nodes"] == 2
    reached, best = first_reached(run_dir, GRID_THRESHOLD)
    assert reached is not None, f"best mean return {best:.2f}"


def test_ray_actors_on_both_nodes_import_the_package_that_registers_the_id(cluster, make_cfg, tmp_path):
    """Ray actors start with Gymnasium's own ids only: each imports minigrid (a known package that
    registers its ids on import) itself, and puts env.wrappers around its environments."""
    import minigrid  # noqa: F401 - the driver knows the ids, as after validation: the actors must not rely on it

    from rlpar.runtime.build import build_trainer

    trainer = build_trainer(make_cfg("env.id=MiniGrid-DoorKey-5x5-v0", "env.wrappers=[minigrid.wrappers.ImgObsWrapper]",
                                     "parallel=distributed", "workers=2", "envs_per_worker=1", "algo.rollout_length=16",
                                     "algo.minibatch_size=32", run_dir=tmp_path / "minigrid"))
    try:
        row = trainer.train()
    finally:
        trainer.close()
    assert (row["env_steps"], row["num_nodes"]) == (32, 2)


@pytest.mark.parametrize("algo", [("algo=impala",), ("algo=dqn", "algo.learning_starts=256")], ids=["impala", "dqn"])
def test_ray_actors_on_both_nodes_take_no_masked_action(cluster, make_cfg, tmp_path, algo):
    """Action masks from a Dict observation on Ray actors: the environments count every masked
    action they are sent in a file (tests/masked_envs.py), which must stay absent."""
    from rlpar.runtime.build import build_trainer
    from tests.unit.test_action_masks import MASKED_ENV

    record = tmp_path / "masked.txt"
    cfg = make_cfg(*algo, MASKED_ENV, f"+env.kwargs.record={record}", "parallel=distributed", "workers=2",
                   "envs_per_worker=2", "model.hidden_sizes=[16]", "checkpoint.every=0", run_dir=tmp_path / "run")
    trainer = build_trainer(cfg)  # no validation probe: its random steps would be counted
    try:
        rows = [trainer.train() for _ in range(6)]
    finally:
        trainer.close()
    assert rows[-1]["num_nodes"] == 2 and rows[-1]["env_steps"] >= 256
    assert not record.exists(), record.read_text().count("\n")


@pytest.mark.parametrize("env", [
    ("env.entry_point=tests.multi_agent_envs:masked_pickers",),
    ("env.entry_point=tests.multi_agent_envs:info_masked_pickers", "env.action_mask_info_key=action_mask"),
], ids=["observation", "info"])
def test_mappo_agents_on_ray_actors_take_no_masked_action(cluster, make_cfg, tmp_path, env):
    """PettingZoo agents' masks (in their observations, or moved there from their infos) on Ray
    actors: every masked action an environment is sent is a line in `record`, which must stay absent."""
    from tests.masked_envs import masked_actions_in_training

    masked, rows = masked_actions_in_training(
        make_cfg, tmp_path, "env=pettingzoo", "algo=mappo", *env, "env.global_state=observations",
        "parallel=distributed", "workers=2", "envs_per_worker=1", "algo.rollout_length=20", iterations=3,
    )
    assert rows[-1]["num_nodes"] == 2 and rows[-1]["agent_steps"] == 3 * 20 * 2
    assert masked == 0


def test_the_opponent_pool_reaches_ray_actors_and_their_games_match_local(cluster, make_cfg, tmp_path):
    """env.opponent=pool on tictactoe: snapshots act on Ray actors on both nodes (with central
    inference too, which acts only for the learner's seat), and the games against each opponent,
    the win rates and the losses are those of the local sampler, iteration after iteration."""
    from rlpar.runtime.build import build_trainer
    from tests.unit.test_opponent_pool import SMALL, rows_of

    layouts = {"local": ("workers=2",),
               "distributed": ("parallel=distributed", "workers=2"),
               "distributed-central": ("parallel=distributed", "workers=2", "parallel.inference=central")}
    rows = {}
    for name, layout in layouts.items():
        trainer = build_trainer(make_cfg(*SMALL, *layout, "parallel.sync_mode=blocking", run_dir=tmp_path / name))
        try:
            rows[name] = rows_of(trainer, 6)
            if name != "local":
                assert trainer.algorithm.sampler.num_nodes() == 2
        finally:
            trainer.close()
    assert any(set(r["games_by_opponent"]) & {"v0", "v2", "v4"} for r in rows["local"])
    assert rows["distributed"] == rows["local"]
    # central inference: no current policy on the actors, so the newest snapshot plays the `self`
    # draws once the pool has come (the first games, drawn before it, play self's random moves)
    central = rows["distributed-central"]
    assert any(set(r["games_by_opponent"]) & {"v0", "v2", "v4"} for r in central)
    assert all("self" not in r["games_by_opponent"] for r in central[2:])
