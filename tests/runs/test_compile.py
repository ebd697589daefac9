"""algo.compile: a compiled minibatch loss learns like the eager one, and their checkpoints are
interchangeable. (Compiling costs ~15-40 s cold on 2 cores; speed is in benchmarks, not here.)"""

import threading
from types import SimpleNamespace

import numpy as np
import pytest

from rlpar.runtime.build import build_trainer

ALGOS = {
    "ppo": ("algo.rollout_length=32", "algo.minibatch_size=64"),
    "dqn": ("algo.rollout_length=16", "algo.learning_starts=128", "algo.batch_size=32"),
    "a2c": ("algo.rollout_length=8",),  # a rollout's valid steps vary: dynamic shapes
    "impala": ("algo.rollout_length=16",),  # so do IMPALA's batches
    "appo": ("algo.rollout_length=32", "algo.minibatch_size=64"),
}
COMPILED_STEP = {"ppo": "CompiledStep", "dqn": "CompiledStep", "a2c": "EagerStep", "impala": "CompiledStep",
                 "appo": "CompiledStep"}
LOSSES = {"ppo": ("loss_policy", "loss_value", "approx_kl"), "dqn": ("loss_q", "td_error_mean", "q_mean"),
          "a2c": ("loss_policy", "loss_value", "loss_entropy"), "impala": ("loss_policy", "loss_value", "loss_entropy"),
          "appo": ("loss_policy", "loss_value", "approx_kl")}


def trainer_for(make_cfg, tmp_path, algo, compiled: bool):
    return build_trainer(make_cfg(f"algo={algo}", *ALGOS[algo], f"algo.compile={str(compiled).lower()}",
                                  "checkpoint.every=0", run_dir=tmp_path / f"{algo}_{compiled}"))


@pytest.mark.slow
@pytest.mark.parametrize("algo", list(ALGOS))
def test_compiled_loss_learns_like_eager_and_checkpoints_cross_over(make_cfg, tmp_path, algo):
    eager, compiled = trainer_for(make_cfg, tmp_path, algo, False), trainer_for(make_cfg, tmp_path, algo, True)
    try:
        assert (eager.algorithm.compiled, compiled.algorithm.compiled) == (False, True)
        # eager: loss, backward and optimiser op by op; compiled: the whole step as one graph
        # (LeanAdam), or the loss compiled (RMSprop, A2C's default)
        assert type(eager.algorithm.gradient_step).__name__ == "EagerStep"
        assert type(compiled.algorithm.gradient_step).__name__ == COMPILED_STEP[algo]
        compiled.algorithm.gradient_step.wait_compiled()  # PPO's steps run eagerly until its compile is done
        rows = {"eager": [eager.train() for _ in range(4)], "compiled": [compiled.train() for _ in range(4)]}
        for key in LOSSES[algo]:
            learned = [r[key] for r in rows["eager"] if key in r]
            assert len(learned) >= 2, key  # DQN learns from its second iteration on
            np.testing.assert_allclose([r[key] for r in rows["compiled"] if key in r], learned, rtol=1e-4, atol=1e-5,
                                       err_msg=key)
        # a compiled run's checkpoint continues eagerly, and the other way round: the same state dict
        state = compiled.state_dict()
        assert state["algorithm"]["model"].keys() == eager.state_dict()["algorithm"]["model"].keys()
        eager.restore(state)
        continued = {"eager": eager.train(), "compiled": compiled.train()}
        for key in LOSSES[algo]:
            np.testing.assert_allclose(continued["eager"][key], continued["compiled"][key], rtol=1e-4, atol=1e-5,
                                       err_msg=key)
    finally:
        eager.close()
        compiled.close()


@pytest.mark.slow
def test_a_run_shorter_than_its_compile_exits_cleanly(tmp_path):
    """PPO compiles in a background thread; a run that ends first must not wait for it, nor let
    the interpreter's shutdown abort under it (exit -6, "terminate called without an active
    exception")."""
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


def test_a_run_that_cannot_go_on_does_not_wait_for_its_compile():
    """(A private Ray instance that lost its GCS was noticed only once the learner's compile was
    done, 10-20 s later.) The wait ends as soon as a registered failure check says so."""
    from rlpar.learning.compiled import CompiledStep
    from rlpar import interrupts

    compiled = threading.Event()
    compiling = threading.Thread(target=compiled.wait, args=(60,), daemon=True)  # a long compile: ends when told
    compiling.start()
    lost = lambda: "the private Ray instance's gcs_server (pid 1) died (killed by SIGKILL)"  # noqa: E731
    interrupts.add_failure_check(lost)
    try:
        CompiledStep._wait_unless_interrupted(SimpleNamespace(_compiling=compiling))
        assert compiling.is_alive()  # returned while the compile was still under way
    finally:
        interrupts.remove_failure_check(lost)
        compiled.set()
    assert not interrupts.failing()
