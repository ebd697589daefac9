"""algo.compile: a compiled minibatch loss learns like the eager one, and their checkpoints are
interchangeable. (Compiling costs ~15-40 s cold on 2 cores; speed is in benchmarks, not here.)"""

import inspect

import numpy as np
import pytest

from rlpar.runtime.build import build_trainer

ALGOS = {
    "ppo": ("algo.rollout_length=32", "algo.minibatch_size=64"),
    "dqn": ("algo.rollout_length=16", "algo.learning_starts=128", "algo.batch_size=32"),
    "a2c": ("algo.rollout_length=8",),  # a rollout's valid steps vary: dynamic shapes
}
LOSSES = {"ppo": ("loss_policy", "loss_value", "approx_kl"), "dqn": ("loss_q", "td_error_mean", "q_mean"),
          "a2c": ("loss_policy", "loss_value", "loss_entropy")}


def trainer_for(make_cfg, tmp_path, algo, compiled: bool):
    return build_trainer(make_cfg(f"algo={algo}", *ALGOS[algo], f"algo.compile={str(compiled).lower()}",
                                  "checkpoint.every=0", run_dir=tmp_path / f"{algo}_{compiled}"))


@pytest.mark.parametrize("algo", list(ALGOS))
def test_compiled_loss_learns_like_eager_and_checkpoints_cross_over(make_cfg, tmp_path, algo):
    eager, compiled = trainer_for(make_cfg, tmp_path, algo, False), trainer_for(make_cfg, tmp_path, algo, True)
    try:
        assert (eager.algorithm.compiled, compiled.algorithm.compiled) == (False, True)
        # eager: the plain method; compiled: what torch.compile made of it
        assert inspect.ismethod(eager.algorithm.loss_terms) and not inspect.ismethod(compiled.algorithm.loss_terms)
        rows = {"eager": [eager.train() for _ in range(4)], "compiled": [compiled.train() for _ in range(4)]}
        for key in LOSSES[algo]:
            learned = [r[key] for r in rows["eager"] if key in r]
            assert len(learned) >= 2, key  # DQN learns from its second iteration on
            np.testing.assert_allclose([r[key] for r in rows["compiled"] if key in r], learned, rtol=1e-4, atol=1e-6,
                                       err_msg=key)
        # a compiled run's checkpoint continues eagerly, and the other way round: the same state dict
        state = compiled.state_dict()
        assert state["algorithm"]["model"].keys() == eager.state_dict()["algorithm"]["model"].keys()
        eager.restore(state)
        continued = {"eager": eager.train(), "compiled": compiled.train()}
        for key in LOSSES[algo]:
            np.testing.assert_allclose(continued["eager"][key], continued["compiled"][key], rtol=1e-4, atol=1e-6,
                                       err_msg=key)
    finally:
        eager.close()
        compiled.close()
