"""SAC and TD3: the actor's maths (squashed Gaussian, its numpy copy), the stacked critics, what
each gradient step moves, exploration, and runs end to end: Pendulum learned, worker processes,
and a SIGKILLed run resumed with its replay equal to one never interrupted."""

import numpy as np
import pytest
import torch
from scipy.special import erf

from rlpar.config.validate import ConfigError, validate_config
from rlpar.envs.spaces import ActionInfo
from rlpar.models.actor_q_spec import ActorQSpec
from rlpar.runtime.build import build_trainer
from rlpar.runtime.evaluation import checkpoint_policy_weights
from tests.defaults import STEPS_PER_ITERATION
from tests.runs.test_kill_resume import CONFIG, kill_between_checkpoints_and_resume, rows, run_cli
from tests.rollouts import LEARNER_ONLY, made

ACTION = ActionInfo(discrete=False, size=2, low=(-2.0, -1.0), high=(2.0, 1.0), shape=(2,))


def spec(**fields):
    return ActorQSpec(obs_dim=3, action=ACTION, hidden_sizes=(16, 16), **fields)


def minibatch(n=64, seed=0):
    rng = np.random.default_rng(seed)
    return {"obs": rng.standard_normal((n, 3)).astype(np.float32),
            "actions": rng.uniform(-1, 1, (n, 2)).astype(np.float32),
            "rewards": rng.standard_normal(n).astype(np.float32),
            "next_obs": rng.standard_normal((n, 3)).astype(np.float32),
            "discounts": np.full(n, 0.99, np.float32)}


def learner(cls_path="rlpar.algos.sac.SAC", model=None, **kwargs):
    from hydra.utils import get_class

    return made(get_class(cls_path), sampler=LEARNER_ONLY, policy_spec=model or spec(), total_steps=10_000, seed=0, compile=False,
                               **kwargs)


def learn(algorithm, batch, steps=1):
    inputs = {"minibatches": [batch], "weights": [np.ones(len(batch["rewards"]), np.float32)], "lr": 1e-3}
    return [algorithm.learn(inputs) for _ in range(steps)]


def test_the_squashed_gaussians_log_probability_is_torchs_tanh_transformed_normal():
    torch.manual_seed(0)
    actor = spec().build().actor
    obs = torch.randn(256, 3)
    actions, logp = actor.sample(obs)
    mean, log_std = actor(obs)
    base = torch.distributions.Normal(mean, log_std.exp())
    squashed = torch.distributions.TransformedDistribution(base, [torch.distributions.TanhTransform(cache_size=1)])
    expected = squashed.log_prob(actions.clamp(-1 + 1e-6, 1 - 1e-6)).sum(-1)
    inner = (actions.abs() < 0.999).all(-1)  # atanh of a float32 near ±1 loses the digits the direct form keeps
    assert torch.allclose(logp[inner], expected[inner], atol=1e-3)
    assert actions.abs().max() <= 1.0


def test_the_numpy_actor_acts_as_the_torch_actor():
    torch.manual_seed(1)
    model = spec().build()
    policy = spec().acting_policy(env_ids=[0, 1, 2, 3])
    weights = {k: v.numpy() for k, v in model.actor.state_dict(prefix="actor.").items()}
    policy.set_weights({**weights, "noise_scale": np.array([0.5, 1.0, 2.0, 4.0, 8.0]), "random_actions": False})
    obs = np.random.default_rng(0).standard_normal((4, 3)).astype(np.float32)
    noise = np.random.default_rng(1).standard_normal((4, 2))
    mean, log_std = (t.detach().double().numpy() for t in model.actor(torch.as_tensor(obs)))
    greedy = policy.act(obs, None)[0]
    assert np.allclose(greedy, np.tanh(mean), atol=1e-6)
    assert np.allclose(greedy, model(torch.as_tensor(obs)).detach().numpy(), atol=1e-6)
    drawn = policy.act(obs, noise)[0]  # environment i's noise scaled by its own rate (0.5, 1, 2, 4)
    scales = np.array([[0.5], [1.0], [2.0], [4.0]])
    assert np.allclose(drawn, np.tanh(mean + scales * np.exp(log_std) * noise), atol=1e-6)
    policy.set_weights({**weights, "random_actions": True})
    assert np.allclose(policy.act(obs, noise)[0], erf(noise / np.sqrt(2)), atol=1e-6)


def test_random_actions_are_uniform_on_the_action_box():
    policy = spec().acting_policy()
    policy.set_weights({**{k: v.numpy() for k, v in spec().build().actor.state_dict(prefix="actor.").items()},
                        "random_actions": True})
    actions = policy.act(np.zeros((200_000, 3)), np.random.default_rng(0).standard_normal((200_000, 2)))[0]
    histogram, _ = np.histogram(actions, bins=10, range=(-1, 1))
    assert np.allclose(histogram / histogram.sum(), 0.1, atol=0.003)


def test_td3s_copy_adds_clipped_gaussian_noise_to_the_tanh_action():
    model = spec(gaussian=False).build()
    policy = spec(gaussian=False).acting_policy()
    policy.set_weights({**{k: v.numpy() for k, v in model.actor.state_dict(prefix="actor.").items()},
                        "noise_scale": 0.3})
    obs, noise = np.ones((5, 3), np.float32), np.random.default_rng(0).standard_normal((5, 2)) * 5
    expected = np.clip(np.tanh(model.actor(torch.as_tensor(obs))[0].detach().double().numpy()) + 0.3 * noise, -1, 1)
    assert np.allclose(policy.act(obs, noise)[0], expected, atol=1e-6)


def test_correlated_noise_is_standard_normal_at_every_step_and_carries_across_rollouts(make_cfg, tmp_path):
    from rlpar.envs.factory import resolve_env_spec
    from rlpar.sampling.rollout import RolloutWorker

    def worker(correlation):
        model = ActorQSpec(obs_dim=3, action=ActionInfo(discrete=False, size=1, low=(-2.0,), high=(2.0,), shape=(1,)),
                           noise_correlation=correlation)
        return RolloutWorker(env_spec=resolve_env_spec(id="Pendulum-v1"), policy_spec=model, num_envs=256,
                             rollout_length=50, seed=0)

    correlated, white = worker(0.9), worker(0.0)
    first, second = correlated._draw_noise(), correlated._draw_noise()
    noise = np.concatenate([first, second])[..., 0]  # [100 steps, 256 environments]
    lag1 = np.mean(noise[1:] * noise[:-1]) / np.mean(noise * noise)
    assert lag1 == pytest.approx(0.9, abs=0.03)
    assert np.mean(first[-1] * second[0]) > 0.6  # across rollouts too: the carry (0 without it)
    assert noise.std() == pytest.approx(1.0, abs=0.1) and noise[0].std() == pytest.approx(1.0, abs=0.3)
    plain = white._draw_noise()[..., 0]
    assert abs(np.mean(plain[1:] * plain[:-1])) < 0.05
    assert np.array_equal(plain[0], first[0, :, 0])  # the same white draws drive both
    state = correlated.get_state()
    after = correlated._draw_noise()
    correlated.set_state(state)
    assert np.array_equal(correlated._draw_noise(), after)  # the carry travels in checkpoints


def test_stacked_critics_are_independent_mlps_and_detached_ones_pass_gradients_to_actions_only():
    torch.manual_seed(0)
    critic = spec().build().critic
    obs, actions = torch.randn(8, 3), torch.randn(8, 2, requires_grad=True)
    q = critic(obs, actions)
    x = torch.cat([obs, actions], -1)
    for k in range(2):
        h = torch.relu(x @ critic.weights[0][k] + critic.biases[0][k])
        h = torch.relu(h @ critic.weights[1][k] + critic.biases[1][k])
        assert torch.allclose(q[k], (h @ critic.weights[2][k] + critic.biases[2][k]).squeeze(-1), atol=1e-6)
    critic(obs, actions, detached=True).sum().backward()
    assert actions.grad is not None and actions.grad.abs().sum() > 0
    assert all(p.grad is None for p in critic.parameters())


def test_a_critic_step_fits_the_targets_and_the_actor_step_leaves_the_critics_alone():
    sac = learner(lr=3e-3)
    batch = {**minibatch(), "discounts": np.zeros(64, np.float32)}  # the targets are the rewards: a regression
    target_before = [p.detach().clone() for p in sac.target_critic.parameters()]
    first = learn(sac, batch)[0]["losses"][0]
    critic = [p.detach().clone() for p in sac.model.critic.parameters()]
    sac.actor_step(obs=torch.as_tensor(batch["obs"]))
    assert all(torch.equal(a, b) for a, b in zip(critic, sac.model.critic.parameters()))
    losses = [float(learn(sac, batch)[0]["losses"][0][0]) for _ in range(150)]
    assert losses[-1] < 0.4 * float(first[0])  # the critics fit the targets (16-wide: not to zero)
    for target, saved, online in zip(sac.target_critic.parameters(), target_before, sac.model.critic.parameters()):
        assert not torch.equal(target, saved) and not torch.equal(target, online)  # Polyak: moved, but only part way


def test_alpha_falls_when_the_entropy_is_above_its_target_and_a_fixed_alpha_stays():
    sac = learner(lr=1e-2)
    entropy_before = None
    for row in learn(sac, minibatch(), steps=20):
        entropy_before = entropy_before or float(row["losses"][0][5])
    alpha = float(sac.alpha())
    assert entropy_before > sac.target_entropy and alpha < 0.9  # entropy of a fresh actor >> -dim(A) = -2
    fixed = learner(alpha=0.2)
    learn(fixed, minibatch(), steps=5)
    assert float(fixed.alpha()) == pytest.approx(0.2)


def test_td3_moves_its_actor_and_targets_every_second_step_only():
    td3 = learner("rlpar.algos.td3.TD3", model=spec(gaussian=False))
    snapshot = lambda module: [p.detach().clone() for p in module.parameters()]  # noqa: E731
    actor, target_actor, target_critic = snapshot(td3.model.actor), snapshot(td3.target_actor), snapshot(td3.target_critic)
    learn(td3, minibatch())  # gradient step 1: the critics only
    assert all(torch.equal(a, b) for a, b in zip(actor, td3.model.actor.parameters()))
    assert all(torch.equal(a, b) for a, b in zip(target_actor, td3.target_actor.parameters()))
    assert all(torch.equal(a, b) for a, b in zip(target_critic, td3.target_critic.parameters()))
    learn(td3, minibatch())  # gradient step 2: the actor, then both targets
    assert not all(torch.equal(a, b) for a, b in zip(actor, td3.model.actor.parameters()))
    assert not all(torch.equal(a, b) for a, b in zip(target_actor, td3.target_actor.parameters()))
    assert not all(torch.equal(a, b) for a, b in zip(target_critic, td3.target_critic.parameters()))


def test_continuous_algorithms_refuse_discrete_actions_and_q_learners_refuse_box_ones_in_one_line(make_cfg):
    with pytest.raises(ConfigError) as refused:
        validate_config(make_cfg("algo=sac", "env=cartpole"))
    assert str(refused.value).count("\n") <= 1 and "learns continuous actions" in str(refused.value)
    with pytest.raises(ConfigError) as refused:
        validate_config(make_cfg("algo=td3", "env=pendulum", "model.gaussian=true"), check_env=False)
    assert "algo=td3 learns a deterministic actor" in str(refused.value)
    with pytest.raises(ConfigError) as refused:
        validate_config(make_cfg("algo=sac", "env=pendulum", "algo.alpha=-1", "algo.policy_delay=0"), check_env=False)
    assert "algo.alpha" in str(refused.value) and "algo.policy_delay" in str(refused.value)
    validate_config(make_cfg("algo=sac", "env=pendulum", "algo.alpha=0.1"))


def test_sac_and_td3_are_themselves_on_every_sampler_and_the_ape_x_style_learners_are_chosen_by_name(make_cfg):
    """parallel=distributed never changes the algorithm: algo=apex_sac / apex_td3 are SAC's and TD3's
    configs plus the replay shards' keys, with SAC's and TD3's presets."""
    for parallel in ("local", "multiprocess", "distributed"):
        assert make_cfg("algo=sac", f"parallel={parallel}").algo._target_ == "rlpar.algos.sac.SAC"
        assert make_cfg("algo=td3", f"parallel={parallel}").algo._target_ == "rlpar.algos.td3.TD3"
    for algo, target, high in (("sac", "ApeXSAC", 1.5), ("td3", "ApeXTD3", 2.0)):
        plain = make_cfg(f"algo={algo}", "env=pendulum", "parallel=distributed")
        apex = make_cfg(f"algo=apex_{algo}", "env=pendulum", "parallel=distributed")
        assert (apex.algo._target_, apex.algo.name) == (f"rlpar.algos.apex_sac.{target}", f"apex_{algo}")
        assert (apex.algo.noise_scale_low, apex.algo.noise_scale_high) == (0.5, high)
        assert (apex.algo.replay.num_shards, apex.algo.replay.samples_per_insert, apex.algo.replay.rate_tolerance) == (
            2, None, None)
        shared = {key for key in plain.algo if key not in ("_target_", "name", "replay")}
        assert {key: apex.algo[key] for key in shared} == {key: plain.algo[key] for key in shared}  # the preset's too
        assert apex.model == plain.model and apex.total_steps == plain.total_steps == 20000  # Pendulum's preset
        assert make_cfg(f"algo=apex_{algo}", "env=pendulum", "parallel=distributed", "preset=null").total_steps == 100000


@pytest.mark.parametrize("parallel", ["local", "multiprocess"])
def test_the_ape_x_style_learners_are_refused_without_ray_in_one_line_naming_the_plain_algorithm(make_cfg, parallel):
    for algo in ("sac", "td3"):
        with pytest.raises(ConfigError) as refused:
            validate_config(make_cfg(f"algo=apex_{algo}", "env=pendulum", f"parallel={parallel}"), check_env=False)
        assert str(refused.value).count("\n") == 0
        assert f"algo=apex_{algo} runs its actors and replay shards as Ray actors" in str(refused.value)
        assert f"use parallel=distributed, or algo={algo} " in str(refused.value)
    validate_config(make_cfg("algo=apex_sac", "env=pendulum", "parallel=distributed", "workers=2"), check_env=False)


FAST = ("env=pendulum", "model.hidden_sizes=[64,64]", "algo.lr=1e-3", "algo.learning_starts=1000",
        "envs_per_worker=1", "algo.rollout_length=32")


@pytest.mark.slow
@pytest.mark.parametrize("algo", ["sac", "td3"])
def test_sac_and_td3_learn_pendulum(make_cfg, tmp_path, algo):
    trainer = build_trainer(make_cfg(f"algo={algo}", *FAST, "total_steps=11000", "checkpoint.every=0",
                                     run_dir=tmp_path / algo))
    try:
        history = [trainer.train() for _ in range(11000 // 32)]
    finally:
        trainer.close()
    assert history[-1]["episode_return_mean"] > -400, [round(r["episode_return_mean"] or 0) for r in history[::20]]
    assert history[-1]["samples_per_insert"] == pytest.approx(256 * (11000 - 1000) / 11000, rel=0.05)


@pytest.mark.slow
@pytest.mark.parametrize("algo", ["sac", "td3"])
def test_sac_and_td3_run_on_worker_processes(make_cfg, tmp_path, algo):
    trainer = build_trainer(make_cfg(f"algo={algo}", "env=pendulum", "model.hidden_sizes=[32,32]", "parallel=multiprocess",
                                     "workers=2", "envs_per_worker=2", "algo.rollout_length=8",
                                     "algo.learning_starts=256", "algo.batch_size=32", run_dir=tmp_path / algo))
    try:
        history = [trainer.train() for _ in range(12)]
        evaluation = trainer.evaluate(2)
        from_checkpoint = spec_policy(trainer, checkpoint_policy_weights(trainer.algorithm.state_dict()))
        from_learner = spec_policy(trainer, trainer.algorithm.policy_weights())
    finally:
        trainer.close()
    obs = np.random.default_rng(0).standard_normal((5, 3))
    assert np.array_equal(from_checkpoint.act(obs, None)[0], from_learner.act(obs, None)[0])  # `rlpar evaluate`'s actions
    assert -2000 < evaluation["eval_return_mean"] < 0
    assert history[-1]["env_steps"] == 12 * 32 and history[-1]["replay_inserts"] == 12 * 32
    assert history[-1]["gradient_steps"] == 32 and history[0]["random_actions"] == 1.0
    assert history[-1]["random_actions"] == 0.0 and history[-1]["policy_version"] > 0


def spec_policy(trainer, weights):
    policy = trainer.algorithm.policy_spec.acting_policy()
    policy.set_weights(weights)
    return policy


@pytest.mark.slow
def test_sac_sigkill_then_resume_with_replay_checkpoint_equals_an_uninterrupted_run(tmp_path):
    """The replay (algo.replay.checkpoint), both optimisers, the target critics and the
    environments travel in checkpoints: the resumed run equals one never interrupted."""
    config = (*CONFIG, "algo=sac", "env=pendulum", "model.hidden_sizes=[32,32]", "algo.batch_size=32",
              "algo.replay_ratio=0.25", "algo.learning_starts=256", "algo.replay.checkpoint=true",
              "model.noise_correlation=0.5", "envs_per_worker=8",
              f"algo.rollout_length={STEPS_PER_ITERATION // 8}")
    reference_dir = tmp_path / "uninterrupted"
    run_cli(*config, run_dir=reference_dir)
    reference = rows(reference_dir)
    last = reference[-1]  # every step is a transition but each episode's autoreset step (200-step episodes)
    assert last["gradient_steps"] > 0 and last["replay_size"] == last["env_steps"] - last["episodes"]
    kill_between_checkpoints_and_resume(tmp_path, reference, config)
