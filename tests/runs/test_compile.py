"""algo.compile: a compiled minibatch loss learns like the eager one, and their checkpoints are
interchangeable. (Compiling costs ~15-40 s cold on 2 cores; speed is in benchmarks, not here.)"""

import numpy as np
import pytest

from rlpar.runtime.build import build_trainer

ALGOS = {
    "ppo": ("algo.rollout_length=32", "algo.minibatch_size=64"),
    "dqn": ("algo.rollout_length=16", "algo.learning_starts=128", "algo.batch_size=32"),
    "a2c": ("algo.rollout_length=8",),  # a rollout's valid steps vary: dynamic shapes
    "impala": ("algo.rollout_length=16",),  # so do IMPALA's batches
    "appo": ("algo.rollout_length=32", "algo.minibatch_size=64"),
    "sac": ("env=pendulum", "envs_per_worker=4", "algo.rollout_length=16", "algo.learning_starts=64", "algo.batch_size=32",
            "model.hidden_sizes=[32,32]"),  # a critic step and an actor step: a graph each
}
COMPILED_STEP = {"ppo": "CompiledStep", "dqn": "CompiledStep", "a2c": "EagerStep", "impala": "CompiledStep",
                 "appo": "CompiledStep", "sac": "CompiledStep"}
LOSSES = {"ppo": ("loss_policy", "loss_value", "approx_kl"), "dqn": ("loss_q", "td_error_mean", "q_mean"),
          "a2c": ("loss_policy", "loss_value", "loss_entropy"), "impala": ("loss_policy", "loss_value", "loss_entropy"),
          "appo": ("loss_policy", "loss_value", "approx_kl"), "sac": ("loss_q", "loss_actor", "alpha")}


def trainer_for(make_cfg, tmp_path, algo, compiled: bool):
    return build_trainer(make_cfg(f"algo={algo}", *ALGOS[algo], f"algo.compile={str(compiled).lower()}",
                                  "checkpoint.every=0", run_dir=tmp_path / f"{algo}_{compiled}"))


@pytest.mark.slow
@pytest.mark.parametrize("algo", list(ALGOS))
def test_compiled_loss_learns_like_eager_and_checkpoints_cross_over(make_cfg, tmp_path, algo):
    import torch._inductor.config

    # SAC's losses draw actions: the compiled graph then takes torch's own random numbers, as eager does
    with torch._inductor.config.patch(fallback_random=algo == "sac"):
        learns_like_eager(make_cfg, tmp_path, algo)


def learns_like_eager(make_cfg, tmp_path, algo) -> None:
    eager, compiled = trainer_for(make_cfg, tmp_path, algo, False), trainer_for(make_cfg, tmp_path, algo, True)
    try:
        assert (eager.algorithm.compiled, compiled.algorithm.compiled) == (False, True)
        # eager: loss, backward and optimiser op by op; compiled: the whole step as one graph
        # (Adam), or the loss compiled (RMSprop, A2C's default)
        for eager_step, compiled_step in zip(steps_of(eager.algorithm), steps_of(compiled.algorithm)):
            assert type(eager_step).__name__ == "EagerStep"
            assert type(compiled_step).__name__ == COMPILED_STEP[algo]
            compiled_step.wait_compiled()  # compile here at first use (a run steps eagerly until a child has warmed the cache)
        rows = both(eager, compiled, lambda trainer: [trainer.train() for _ in range(4)])
        for key in LOSSES[algo]:
            learned = [r[key] for r in rows["eager"] if key in r]
            assert len(learned) >= 2, key  # DQN learns from its second iteration on
            np.testing.assert_allclose([r[key] for r in rows["compiled"] if key in r], learned, rtol=1e-4, atol=1e-5,
                                       err_msg=key)
        # a compiled run's checkpoint continues eagerly, and the other way round: the same state dict
        state = compiled.state_dict()
        assert state["algorithm"]["model"].keys() == eager.state_dict()["algorithm"]["model"].keys()
        eager.restore(state)
        continued = both(eager, compiled, lambda trainer: trainer.train())
        for key in LOSSES[algo]:
            np.testing.assert_allclose(continued["eager"][key], continued["compiled"][key], rtol=1e-4, atol=1e-5,
                                       err_msg=key)
    finally:
        eager.close()
        compiled.close()


def both(eager, compiled, run) -> dict:
    """`run` on each trainer from the same torch random state (SAC draws actions in its losses,
    from torch's generator, which the two trainers share in this process)."""
    import torch

    state = torch.get_rng_state()
    results = {}
    for name, trainer in (("eager", eager), ("compiled", compiled)):
        torch.set_rng_state(state)
        results[name] = run(trainer)
    return results


def steps_of(algorithm) -> list:
    """An algorithm's gradient steps: one, or SAC's critic step and actor step."""
    return [algorithm.gradient_step] if hasattr(algorithm, "gradient_step") else [algorithm.critic_step,
                                                                                  algorithm.actor_step]


@pytest.mark.slow
def test_a_run_shorter_than_its_compile_exits_cleanly(tmp_path):
    """The learner's first compile runs in a forked child; a run that ends first neither waits
    for it nor leaves it behind (the child is a fork: it has the run's command line)."""
    import psutil
    import subprocess
    import sys
    from pathlib import Path

    proc = subprocess.run(
        [sys.executable, "main.py", "algo.compile=true", "total_steps=512", "progress=false", "checkpoint.every=0",
         f"hydra.run.dir={tmp_path}"],
        cwd=Path(__file__).resolve().parents[2], capture_output=True, text=True, timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "done: 512 steps" in proc.stdout, proc.stdout  # printed and flushed before the quick exit
    assert (tmp_path / "checkpoints").is_dir() and list((tmp_path / "checkpoints").glob("checkpoint_*.pt"))
    left = [p.pid for p in psutil.process_iter(["cmdline"]) if any(str(tmp_path) in arg for arg in p.info["cmdline"] or ())]
    assert left == []


WALL_CLOCK = {"wall_time_s", "fps", "learner_wait_fraction", "actor_idle_fraction"}  # and every time_* field


def rows_without_wall_clock(run_dir) -> list[dict]:
    import json

    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return [{k: v for k, v in row.items() if k not in WALL_CLOCK and not k.startswith("time_")} for row in rows]


@pytest.mark.slow
def test_two_runs_of_one_seed_with_compile_on_are_the_same_cold_cache_then_warm(tmp_path):
    """The compiled step's floats differ from the eager one's in the last bits, so the switch
    comes at a gradient step fixed in advance, not when the compile happens to end: the first run
    (cold cache) waits there for its compile, the second (warm) finds it done, and their rows are
    the same. Minibatches of 128: one compiled graph (three steps an epoch, one by one); 6 gradient
    steps an iteration, so the switch at step 12 comes with iteration 3 of 4."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    cache = tmp_path / "inductor"
    cache.mkdir()
    runs, logs = {}, {}
    for name in ("cold", "warm"):
        run_dir = tmp_path / name
        proc = subprocess.run(
            [sys.executable, "main.py", "seed=3", "algo.compile=true", "algo.compile_switch=12", "algo.minibatch_size=128",
             "total_steps=2048", "progress=false", "checkpoint.every=0", f"run_dir={run_dir}"],
            cwd=Path(__file__).resolve().parents[2], capture_output=True, text=True, timeout=600,
            env={**os.environ, "TORCHINDUCTOR_CACHE_DIR": str(cache)},
        )
        assert proc.returncode == 0, proc.stderr[-2000:]
        runs[name], logs[name] = rows_without_wall_clock(run_dir), (run_dir / "main.log").read_text()
    assert [row["gradient_steps"] for row in runs["cold"]] == [6, 6, 6, 6]
    assert runs["cold"] == runs["warm"]
    for name, log in logs.items():  # both crossed the switch, there
        assert "the learner's step is compiled from gradient step 12 " in log, name
