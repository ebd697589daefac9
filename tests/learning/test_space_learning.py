"""Image, Dict, Tuple, MultiDiscrete and MultiBinary spaces really train (rlpar/envs/toy.py),
and images stay uint8 from the environment to the learner's network."""

import json

import numpy as np
import pytest

from rlpar.config.validate import ConfigError, validate_config
from rlpar.envs.factory import EnvSpec
from rlpar.envs.spaces import describe_action_space, describe_observation_space
from rlpar.models.spec import PolicySpec
from rlpar.runtime.build import build_trainer
from rlpar.sampling.rollout import RolloutWorker

GRID = "rlpar/PixelGridWorld-v0"
GRID_THRESHOLD = 0.75  # random walks score ~0.15, shortest paths ~0.87 (toy.py)


def first_reached(run_dir, threshold):
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    reached = [r["env_steps"] for r in rows if (r["episode_return_mean"] or 0) >= threshold]
    return (reached[0] if reached else None), max(r["episode_return_mean"] or 0 for r in rows)


def train(make_cfg, run_dir, *overrides):
    trainer = build_trainer(make_cfg(*overrides, "checkpoint.every=0", run_dir=run_dir))
    try:
        trainer.fit()
        return trainer.algorithm
    finally:
        trainer.close()


@pytest.mark.slow
def test_grid_world_is_learned_through_the_cnn_locally(make_cfg, tmp_path):
    algorithm = train(make_cfg, tmp_path / "grid", f"env.id={GRID}", "total_steps=60000")
    assert type(algorithm.model).__name__ == "CNNActorCritic"
    assert algorithm.policy_spec.chosen_encoder == "small" and algorithm.policy_spec.obs_dtype == "uint8"
    reached, best = first_reached(tmp_path / "grid", GRID_THRESHOLD)
    assert reached is not None, f"best mean return {best:.2f}"


def test_image_rollouts_hold_the_environments_bytes():
    """uint8 from the env to the batch: the rows are the images themselves, not scaled floats."""
    import gymnasium as gym

    env = gym.make(GRID)
    spec = PolicySpec(**describe_observation_space(env.observation_space).as_kwargs(),
                      action=describe_action_space(env.action_space), acting="numpy")
    worker = RolloutWorker(env_spec=EnvSpec(id=GRID), policy_spec=spec, num_envs=3, rollout_length=4, seed=7)
    import torch

    worker.set_weights({k: v.numpy() for k, v in spec.build().state_dict().items()}, 1)
    first = worker.raw_obs.copy()
    batch = worker.sample()
    worker.close()
    assert batch.obs.dtype == np.uint8 and batch.last_obs.dtype == np.uint8
    np.testing.assert_array_equal(batch.obs[0], first)
    for i in range(3):
        image, _ = env.reset(seed=7 + i)
        np.testing.assert_array_equal(batch.obs[0, i].reshape(5, 5, 3), image)
    assert set(np.unique(batch.obs)) <= {0, 255}
    assert torch.is_tensor(torch.as_tensor(batch.obs))


@pytest.mark.parametrize("env_id,algo,threshold", [
    ("rlpar/DictTarget-v0", "ppo", 9.0),  # Dict of Discrete and Box; random 2.5 of 10
    ("rlpar/MultiDiscreteMatch-v0", "ppo", 9.0),  # Tuple of Discrete, MultiDiscrete actions; random 3.3
    ("rlpar/MultiBinaryMatch-v0", "a2c", 9.0),  # Tuple of MultiBinary, MultiBinary actions; random 5
])
@pytest.mark.slow
def test_structured_spaces_are_learned(make_cfg, tmp_path, env_id, algo, threshold):
    run_dir = tmp_path / "learn"
    train(make_cfg, run_dir, f"env.id={env_id}", f"algo={algo}", "total_steps=30000")
    reached, best = first_reached(run_dir, threshold)
    assert reached is not None, f"best mean return {best:.2f}"


@pytest.mark.parametrize("algo", ["dqn", "apex", "async_dqn"])
def test_q_learning_refuses_factored_actions_in_one_line(make_cfg, tmp_path, algo):
    with pytest.raises(ConfigError) as err:
        validate_config(make_cfg("env.id=rlpar/MultiDiscreteMatch-v0", f"algo={algo}", run_dir=tmp_path / "q"))
    (problem,) = err.value.problems
    assert f"algo={algo}" in problem and "MultiDiscrete" in problem
    suggested = problem.split("use algo=")[1].replace(" or ", ", ").split(", ")
    assert "ppo" in suggested and "dqn" not in suggested


@pytest.mark.slow
def test_model_choices_for_images_are_checked_up_front(make_cfg, tmp_path):
    with pytest.raises(ConfigError) as err:
        validate_config(make_cfg(f"env.id={GRID}", "model=nature_cnn", run_dir=tmp_path / "n"))
    assert err.value.problems == ["model: encoder 'nature' needs images of at least 36x36 pixels, these are 5x5 "
                                  "(use encoder=small or impala)"]
    with pytest.raises(ConfigError) as err:
        validate_config(make_cfg(f"env.id={GRID}", "model.normalize_obs=true", run_dir=tmp_path / "z"))
    assert err.value.problems[0].startswith("model.normalize_obs: rlpar/PixelGridWorld-v0 has image observations")
    with pytest.raises(ConfigError) as err:
        validate_config(make_cfg("model=impala_cnn", run_dir=tmp_path / "v"))
    assert err.value.problems == ["model: encoder 'impala' is a CNN for image observations; these are vectors"]


@pytest.mark.slow
def test_car_racing_builds_a_cnn_not_a_27648_input_mlp(make_cfg, tmp_path):
    pytest.importorskip("Box2D", reason="CarRacing-v3 needs box2d (requirements.txt installs it)")
    trainer = build_trainer(make_cfg("env.id=CarRacing-v3", "total_steps=1000", run_dir=tmp_path / "car"))
    try:
        model, spec = trainer.algorithm.model, trainer.algorithm.policy_spec
        assert (spec.chosen_encoder, spec.image_shape, spec.channels_last) == ("nature", (3, 96, 96), True)
        assert type(model).__name__ == "CNNActorCritic"
        first_layer = next(p for p in model.parameters() if p.dim() == 4)
        assert tuple(first_layer.shape) == (32, 3, 8, 8)
        assert max(p.shape[-1] for p in model.parameters()) < 27_648  # no layer reads the flat image
    finally:
        trainer.close()


def test_ape_x_actors_prioritise_with_a_torch_acting_copy_as_with_numpy():
    """Ape-X's actors on images (a CNN Q-network): the torch copy's initial priorities are the
    numpy copy's, to float32 rounding."""
    import gymnasium as gym

    from rlpar.models.q_spec import QNetworkSpec
    from rlpar.sampling.prioritizing_worker import PrioritizingWorker

    env = gym.make(GRID)
    fields = dict(**describe_observation_space(env.observation_space).as_kwargs(),
                  action=describe_action_space(env.action_space), hidden_sizes=(32,))
    weights = None
    priorities = {}
    for acting in ("numpy", "torch"):
        spec = QNetworkSpec(**fields, acting=acting)
        if weights is None:
            weights = {k: v.numpy() for k, v in spec.build().state_dict().items()} | {"epsilon": 0.5}
        worker = PrioritizingWorker(env_spec=EnvSpec(id=GRID), policy_spec=spec, num_envs=2, rollout_length=8, seed=3,
                                    n_step=3, gamma=0.99)
        worker.set_weights(weights, 1)
        batch = worker.sample()
        worker.close()
        priorities[acting] = batch.extras["priorities"][0]
    assert len(priorities["numpy"]) > 0 and priorities["numpy"].std() > 0
    np.testing.assert_allclose(priorities["torch"], priorities["numpy"], rtol=1e-4, atol=1e-6)
