"""Invalid-action masks from a Dict observation key (issue 43): masked actions are never taken by
the torch networks, the numpy and torch acting copies, training or evaluation, counted on a real
Gymnasium environment (tests/masked_envs.py) that ends an episode on any masked action."""

import gymnasium as gym
import numpy as np
import pytest
import torch

from rlpar.config.validate import ConfigError, validate_config
from rlpar.envs.factory import EnvSpec
from rlpar.envs.spaces import describe_action_space, describe_observation_space, draw_noise, flatten_observation_fn
from rlpar.models.action_masks import MASKED_LOGIT
from rlpar.models.q_spec import QNetworkSpec
from rlpar.models.spec import PolicySpec
from rlpar.runtime.build import build_trainer
from rlpar.runtime.evaluation import evaluate_policy
from tests.masked_envs import MaskedChoices, MaskedMultiChoices, masked_actions_in_training

MASKED_ENV = "env.entry_point=tests.masked_envs:MaskedChoices"


def spec_for(env: gym.Env, model=PolicySpec, **fields):
    return model(**describe_observation_space(env.observation_space).as_kwargs(),
                 action=describe_action_space(env.action_space), **fields)


def weights_of(module) -> dict:
    return {name: value.detach().numpy() for name, value in module.state_dict().items()}


def masked_rows(env: gym.Env, n: int, seed: int = 0) -> np.ndarray:
    """Rows of `n` observations of `env` (its masks among them), as training flattens them."""
    env.reset(seed=seed)
    flatten = flatten_observation_fn(env.observation_space)
    observations = [env._draw() for _ in range(n)]
    return flatten({key: np.stack([o[key] for o in observations]) for key in env.observation_space.spaces})


def test_the_mask_is_found_in_the_rows_and_never_read_by_the_network():
    env = MaskedChoices()
    spec = spec_for(env)
    assert spec.mask_columns == (0, 6)  # Gymnasium's Dict orders its keys: action_mask, then obs
    rows = torch.as_tensor(masked_rows(env, 64))
    model = spec.build()
    flipped = rows.clone()
    flipped[:, :6] = 1.0  # everything legal: the logits of legal actions and the values do not change
    (out, values), (out_all, values_all) = model.towers(rows), model.towers(flipped)
    legal = rows[:, :6] > 0.5
    assert torch.equal(out[legal], out_all[legal]) and torch.equal(values, values_all)
    assert (out[~legal] == MASKED_LOGIT).all()
    read = spec_for(env, mask_as_input=True).build()
    read.load_state_dict(model.state_dict())
    assert not torch.equal(read.towers(rows)[1], read.towers(flipped)[1])  # mask_as_input: the network reads it
    assert spec_for(env, action_mask_key=None).mask_columns is None


@pytest.mark.parametrize("env", [MaskedChoices(), MaskedMultiChoices()], ids=["discrete", "multidiscrete"])
def test_log_probabilities_and_entropy_are_those_of_the_distribution_over_legal_actions(env):
    torch.manual_seed(0)
    spec = spec_for(env, hidden_sizes=(16,))
    model = spec.build()
    with torch.no_grad():  # logits of some scale, not the 0.01-gain head's near-uniform ones
        model.weights[-1][0].normal_(0.0, 1.0)
    rows = torch.as_tensor(masked_rows(env, 200))
    rows[0, :] = 0.0  # a row with every action masked: its factors fall back to no mask
    nvec = env.action_space.nvec if isinstance(env.action_space, gym.spaces.MultiDiscrete) else [env.action_space.n]
    actions = torch.as_tensor(np.stack([env.action_space.sample() for _ in range(len(rows))]))
    logits = model.towers(rows)[0]
    expected_logp, expected_entropy = torch.zeros(len(rows)), torch.zeros(len(rows))
    for i, row in enumerate(rows):
        start = 0
        for f, n in enumerate(nvec):
            legal = row[start : start + n] > 0.5
            legal = legal if legal.any() else torch.ones_like(legal)
            dist = torch.distributions.Categorical(logits=logits[i, start : start + n][legal])
            action = int(actions[i] if len(nvec) == 1 else actions[i, f])
            if legal[action]:
                expected_logp[i] += dist.log_prob(torch.tensor(int(legal[:action].sum())))
            else:
                expected_logp[i] = -np.inf
            expected_entropy[i] += dist.entropy()
            start += n
    logp, entropy, _ = model.evaluate_actions(rows, actions)
    taken_legal = torch.isfinite(expected_logp)
    assert taken_legal.sum() > 20 and (~taken_legal).sum() > 20
    torch.testing.assert_close(logp[taken_legal], expected_logp[taken_legal])
    assert (logp[~taken_legal] < -1e29).all()  # a masked action: log-probability MASKED_LOGIT, finite
    torch.testing.assert_close(entropy, expected_entropy)
    (logp[taken_legal].sum() + entropy.sum()).backward()
    assert all(torch.isfinite(p.grad).all() for p in model.parameters() if p.grad is not None)


def count_masked(policy, env_cls=MaskedChoices, steps=3000, num_envs=4, seed=0, **env_kwargs) -> int:
    """Masked actions `policy` takes in `steps` steps of `num_envs` environments, noise drawn as
    rollouts draw it (every action sampled from the policy's distribution)."""
    env = gym.vector.SyncVectorEnv([lambda: env_cls(**env_kwargs) for _ in range(num_envs)])
    flatten = flatten_observation_fn(env.single_observation_space)
    action = describe_action_space(env.single_action_space)
    rng = np.random.default_rng(seed)
    state = np.zeros((num_envs, policy.state_size)) if policy.state_size else None
    before = env_cls.masked_taken
    obs, _ = env.reset(seed=seed)
    for _ in range(steps // num_envs):
        x = policy.normalize(flatten(obs))
        actions, _, _ = policy.act(x, draw_noise(rng, action, num_envs).astype(policy.dtype), state)
        obs, *_ = env.step(actions)
    env.close()
    return env_cls.masked_taken - before


@pytest.mark.parametrize("fields", [{}, {"acting": "numpy32"}, {"recurrent": "gru", "recurrent_size": 8}],
                         ids=["numpy", "numpy32", "recurrent"])
def test_numpy_acting_copies_take_no_masked_action(fields):
    env = MaskedChoices()
    spec = spec_for(env, hidden_sizes=(16,), normalize_obs=True, **fields)
    module = spec.build()
    policy = spec.acting_policy()
    policy.set_weights(weights_of(module))
    rows = masked_rows(env, 32)
    if not fields.get("recurrent"):  # the copy's masked logits are the module's
        torch_out = module.towers(torch.as_tensor(rows))[0].detach().numpy()
        np.testing.assert_allclose(policy.outputs(rows)[0], torch_out, rtol=1e-4, atol=1e-5)
    assert count_masked(policy) == 0
    unmasked = spec_for(env, hidden_sizes=(16,), action_mask_key=None, **fields).acting_policy()
    unmasked.set_weights(weights_of(spec_for(env, hidden_sizes=(16,), action_mask_key=None, **fields).build()))
    assert count_masked(unmasked, steps=400) > 10  # the same copy without the mask: the count counts


def test_multidiscrete_masks_apply_per_factor():
    env = MaskedMultiChoices()
    spec = spec_for(env, hidden_sizes=(16,))
    policy = spec.acting_policy()
    policy.set_weights(weights_of(spec.build()))
    assert count_masked(policy, MaskedMultiChoices) == 0


@pytest.mark.parametrize("fields", [{}, {"recurrent": "gru", "recurrent_size": 8}], ids=["mlp", "recurrent"])
def test_q_network_copies_explore_and_exploit_among_legal_actions_only(fields):
    env = MaskedChoices()
    spec = spec_for(env, QNetworkSpec, hidden_sizes=(16,), **fields)
    module = spec.build()
    policy = spec.acting_policy()
    policy.set_weights({**weights_of(module), "epsilon": 0.5})  # half the actions random
    assert count_masked(policy) == 0
    policy.set_weights({**weights_of(module), "epsilon": 0.0})
    assert count_masked(policy, steps=1000) == 0
    if not fields:  # the target maxima and double DQN's argmax read the network's masked Q-values
        rows = torch.as_tensor(masked_rows(env, 64))
        q = module(rows)
        legal = rows[:, :6] > 0.5
        assert (q[~legal] == MASKED_LOGIT).all()
        assert legal[torch.arange(64), q.argmax(dim=1)].all()
        assert torch.equal(q.max(dim=1).values, q.masked_fill(~legal, -np.inf).max(dim=1).values)


@pytest.mark.parametrize("stochastic", [False, True], ids=["deterministic", "stochastic"])
@pytest.mark.parametrize("model", [PolicySpec, QNetworkSpec], ids=["actor_critic", "q_network"])
def test_evaluation_takes_no_masked_action(model, stochastic):
    spec = spec_for(MaskedChoices(), model, hidden_sizes=(16,))
    weights = weights_of(spec.build())
    before, steps = MaskedChoices.masked_taken, MaskedChoices.steps_taken
    evaluate_policy(weights, policy_spec=spec, env_spec=EnvSpec(entry_point="tests.masked_envs:MaskedChoices"),
                    num_episodes=40, seed=3, stochastic=stochastic)
    assert MaskedChoices.steps_taken - steps == 40 * 20  # every episode ran to its end
    assert MaskedChoices.masked_taken == before


PPO = ("algo=ppo", MASKED_ENV, "parallel=local", "workers=1", "envs_per_worker=4", "algo.rollout_length=128",
       "model.hidden_sizes=[32]", "checkpoint.every=0", "seed=1")


@pytest.mark.slow
def test_ppo_trains_without_masked_actions_and_learns(make_cfg, tmp_path):
    cfg = make_cfg(*PPO, "total_steps=8192", run_dir=tmp_path / "ppo")
    trainer = build_trainer(cfg, env_probe=validate_config(cfg))
    before, steps = MaskedChoices.masked_taken, MaskedChoices.steps_taken
    try:
        history = [trainer.train() for _ in range(16)]
        normalizer = trainer.algorithm.model.obs_normalizer
    finally:
        trainer.close()
    assert MaskedChoices.steps_taken - steps >= 7000  # 8192 steps, less the vector env's autoreset steps
    assert MaskedChoices.masked_taken == before
    returns = [r["episode_return_mean"] for r in history if r["episode_return_mean"] is not None]
    assert returns[-1] > returns[0] + 3, returns  # random legal play: ~20 / 3 of 20; learned: near 20
    assert normalizer.enabled and (normalizer.mean[:6] == 0).all() and (normalizer.var[:6] == 1).all()
    assert (normalizer.var[6:] != 1).any()  # the observation's own columns are whitened


@pytest.mark.slow
def test_dqn_trains_without_masked_actions(make_cfg, tmp_path):
    cfg = make_cfg("algo=dqn", MASKED_ENV, "parallel=local", "workers=1", "envs_per_worker=4",
                   "model.hidden_sizes=[32]", "algo.learning_starts=256", "algo.batch_size=32",
                   "algo.exploration_steps=2000", "total_steps=3072", "checkpoint.every=0", run_dir=tmp_path / "dqn")
    trainer = build_trainer(cfg, env_probe=validate_config(cfg))
    before, steps = MaskedChoices.masked_taken, MaskedChoices.steps_taken
    try:
        history = [trainer.train()]
        while history[-1]["env_steps"] < 3072:
            history.append(trainer.train())
    finally:
        trainer.close()
    assert history[-1]["gradient_steps"] > 0
    assert MaskedChoices.steps_taken - steps >= 2800  # 3072 steps, less autoreset steps
    assert MaskedChoices.masked_taken == before


@pytest.mark.parametrize("entry_point, words", [
    ("MaskedChoicesBoxActions", "the action space is Box: masks are for Discrete and MultiDiscrete actions"),
    ("MaskedChoicesWideMask", "'action_mask' has 6 columns, but the action space has 5 choices"),
])
def test_a_mask_that_cannot_mask_the_actions_is_refused_in_one_line(make_cfg, entry_point, words):
    with pytest.raises(ConfigError) as err:
        validate_config(make_cfg("algo=ppo", f"env.entry_point=tests.masked_envs:{entry_point}"))
    problems = [p for p in err.value.problems if "action_mask" in p]
    assert len(problems) == 1 and words in problems[0] and "\n" not in problems[0], err.value.problems
    validate_config(make_cfg("algo=ppo", f"env.entry_point=tests.masked_envs:{entry_point}",
                             "model.action_mask_key=null"))  # read as an observation: accepted


@pytest.mark.parametrize("overrides", [
    ("algo=ppo", "parallel=multiprocess"),
    ("algo=ppo", "parallel=multiprocess", "parallel.inference=central", "parallel.inference_backend=torch",
     "parallel.sync_mode=blocking"),
    ("algo=impala", "parallel=multiprocess", "parallel.inference=central", "parallel.inference_backend=numpy",
     "parallel.sync_mode=blocking"),
], ids=["ppo-workers", "ppo-central-torch", "impala-central-numpy"])
def test_batches_of_worker_processes_and_central_inference_hold_legal_actions_only(make_cfg, tmp_path, overrides):
    """Batches carry the masks in their observation rows: every action of a valid step is legal in its row."""
    cfg = make_cfg(*overrides, MASKED_ENV, "workers=2", "envs_per_worker=2", "algo.rollout_length=64",
                   "model.hidden_sizes=[16]", "checkpoint.every=0", run_dir=tmp_path / "run")
    trainer = build_trainer(cfg)
    try:
        algorithm = trainer.algorithm
        batches = [algorithm.sampler.sample(algorithm.get_weights(), algorithm.version).copy() for _ in range(3)]
    finally:
        trainer.close()
    for batch in batches:
        valid = batch.valid.astype(bool)
        legal = np.take_along_axis(batch.obs[..., :6], batch.actions[..., None].astype(np.int64), axis=-1)[..., 0]
        assert valid.sum() > 200 and (legal[valid] == 1).all()
        assert (batch.rewards >= 0).all()  # a masked action would have cost -10


ALGORITHMS = {
    "a2c": ("algo=a2c", "parallel=local"),
    "appo": ("algo=appo", "parallel=local"),
    "impala": ("algo=impala", "parallel=local"),
    "ppo-gru": ("algo=ppo", "parallel=local", "model.recurrent=gru", "model.recurrent_size=16"),
    "r2d2": ("algo=dqn", "parallel=local", "model.recurrent=gru", "model.recurrent_size=16",
             "algo.learning_starts=256", "algo.batch_size=8", "algo.burn_in=4", "algo.sequence_length=8"),
    "a3c": ("algo=a3c", "parallel=multiprocess", "workers=2"),
    "async_dqn": ("algo=async_dqn", "parallel=multiprocess", "workers=2"),
    "apex": ("algo=apex", "parallel=multiprocess", "workers=2", "algo.learning_starts=256"),
    "ppo-multidiscrete": ("algo=ppo", "parallel=local", "env.entry_point=tests.masked_envs:MaskedMultiChoices"),
}

SLOW_ALGORITHMS = {"ppo-gru", "apex"}  # the full tier's: several seconds each


@pytest.mark.parametrize("name", [pytest.param(n, marks=pytest.mark.slow) if n in SLOW_ALGORITHMS else n for n in ALGORITHMS])
def test_every_discrete_algorithm_trains_without_masked_actions(make_cfg, tmp_path, name):
    """Environments in worker processes count masked actions in a file (`record`)."""
    overrides = ALGORITHMS[name]
    env = () if any(o.startswith("env.entry_point=") for o in overrides) else (MASKED_ENV,)
    masked, rows = masked_actions_in_training(make_cfg, tmp_path, *overrides, *env, "envs_per_worker=2", iterations=6)
    assert rows[-1]["env_steps"] >= 60
    assert masked == 0


@pytest.mark.parametrize("env_cls", [MaskedChoices, MaskedMultiChoices], ids=["discrete", "multidiscrete"])
def test_validation_probes_the_environment_with_legal_actions_only(make_cfg, env_cls):
    """An environment may refuse an illegal action: validation's random steps read its mask."""
    before, steps = env_cls.masked_taken, env_cls.steps_taken
    validate_config(make_cfg("algo=ppo", f"env.entry_point=tests.masked_envs:{env_cls.__name__}"))
    assert env_cls.steps_taken - steps >= 6 and env_cls.masked_taken == before


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bf16", "fp16"])
def test_masked_outputs_stay_finite_under_autocast(dtype):
    """algo.precision: MASKED_LOGIT is not finite in float16, so masked outputs are float32."""
    env = MaskedChoices()
    rows = torch.as_tensor(masked_rows(env, 64))
    legal_actions = torch.as_tensor([int(np.flatnonzero(row[:6].numpy())[0]) for row in rows])
    model, q_network = spec_for(env).build(), spec_for(env, QNetworkSpec).build()
    with torch.autocast("cpu", dtype=dtype):
        logp, entropy, _ = model.evaluate_actions(rows, legal_actions)
        q = q_network(rows)
    (logp.sum() + entropy.sum()).backward()
    assert torch.isfinite(logp).all() and torch.isfinite(entropy).all() and torch.isfinite(q).all()
    assert all(torch.isfinite(p.grad).all() for p in model.parameters() if p.grad is not None)
    assert (q[rows[:, :6] < 0.5] == MASKED_LOGIT).all() and (q.max(dim=1).values > -1e29).all()


@pytest.mark.slow
def test_ppo_learns_a_multidiscrete_task_masked_per_factor(make_cfg, tmp_path):
    """End to end: the mask is the factors' masks in turn (Gymnasium's and SB3-contrib's MultiDiscrete
    convention); the workers' log-probabilities are the learner's on the same rows (batches carry the
    masks), no masked choice is taken, and the policy learns to choose the pointed column."""
    cfg = make_cfg("algo=ppo", "env.entry_point=tests.masked_envs:MaskedMultiChoices", "parallel=local", "workers=1",
                   "envs_per_worker=4", "algo.rollout_length=128", "model.hidden_sizes=[32]", "model.normalize_obs=false",
                   "checkpoint.every=0", "seed=2", "total_steps=8192", run_dir=tmp_path / "run")
    trainer = build_trainer(cfg, env_probe=validate_config(cfg))
    before = MaskedMultiChoices.masked_taken
    try:
        algorithm = trainer.algorithm
        batch = algorithm.sampler.sample(algorithm.get_weights(), algorithm.version).copy()
        valid = batch.valid.astype(bool)
        obs, actions = torch.as_tensor(batch.obs[valid]), torch.as_tensor(batch.actions[valid])
        with torch.no_grad():  # the weights the batch was sampled with
            logp = algorithm.model.evaluate_actions(obs, actions)[0].numpy()
        history = [trainer.train() for _ in range(16)]
    finally:
        trainer.close()
    columns = actions.numpy() + np.array([0, 3])
    assert (np.take_along_axis(obs[:, :7].numpy(), columns, axis=1) == 1).all()  # every factor's choice legal
    np.testing.assert_allclose(logp, batch.logp[valid], rtol=1e-4, atol=1e-5)
    assert MaskedMultiChoices.masked_taken == before
    returns = [r["episode_return_mean"] for r in history if r["episode_return_mean"] is not None]
    assert returns[-1] > returns[0] + 3, returns
