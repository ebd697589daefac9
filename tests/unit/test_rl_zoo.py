"""RL Baselines3 Zoo's and CleanRL's reference figures (rlpar/analysis/rl_zoo.py) and the benchmark
table's arithmetic: which reference row an rlpar row is compared with, the ratio for either sign of
reward, the bar (the figure minus one std), the time to it and the curve files' names."""

import pytest

from rlpar.analysis import rl_zoo
from rlpar.analysis.benchmark import curve_name, reached
from rlpar.report import _zoo_row


def test_the_figures_issue_29_quotes_are_rl_zoos():
    quoted = {("ppo", "Acrobot-v1"): (-73.506, 1_000_000), ("ppo", "LunarLander-v3"): (242.119, 1_000_000),
              ("ppo", "MountainCar-v0"): (-110.423, 1_000_000), ("ppo", "Hopper-v5"): (2410.435, 1_000_000),
              ("ppo", "HalfCheetah-v5"): (5819.099, 1_000_000), ("dqn", "Acrobot-v1"): (-76.639, 100_000),
              ("dqn", "LunarLander-v3"): (154.382, 100_000), ("sac", "HalfCheetah-v5"): (9535.451, 1_000_000),
              ("sac", "Walker2d-v5"): (3863.203, 1_000_000), ("td3", "Hopper-v5"): (3606.390, 1_000_000)}
    for (algo, env), (mean, budget) in quoted.items():
        row = rl_zoo.reference(algo, env)
        assert (row.mean, row.n_timesteps) == (mean, budget), (algo, env)


def test_rows_are_unique_and_their_figures_plausible():
    keys = [(row.algo, row.env) for row in rl_zoo.REFERENCE_ROWS]
    assert len(keys) == len(set(keys))
    assert all(row.std >= 0 and row.n_timesteps >= 20_000 and row.eval_episodes > 0 for row in rl_zoo.ROWS)
    assert {row.source for row in rl_zoo.ROWS} == {rl_zoo.RL_ZOO}


def test_the_atari_rows_are_cleanrls_ppo_atari_figures_over_seeds_at_10m_agent_steps():
    quoted = {"ALE/Breakout-v5": ("BreakoutNoFrameskip-v4", 414.66, 28.09),
              "ALE/Pong-v5": ("PongNoFrameskip-v4", 20.36, 0.20),
              "ALE/BeamRider-v5": ("BeamRiderNoFrameskip-v4", 1915.93, 484.58)}
    for env, (cleanrl_env, mean, std) in quoted.items():
        for algo in ("ppo", "impala", "appo"):  # IMPALA and APPO against PPO's, as on the other tasks
            row = rl_zoo.reference(algo, env)
            assert (row.source, row.algo, row.env, row.mean, row.std, row.n_timesteps, row.eval_episodes) == (
                rl_zoo.CLEANRL, "ppo", cleanrl_env, mean, std, 10_000_000, None), (algo, env)
    assert rl_zoo.reference("ppo", "ALE/BeamRider-v5").bar == pytest.approx(1915.93 - 484.58)
    assert rl_zoo.reference("dqn", "ALE/Pong-v5") is None


@pytest.mark.parametrize("algo, env, expected", [
    ("impala", "LunarLander-v3", ("ppo", "LunarLander-v2", 242.119)),
    ("appo", "Pendulum-v1", ("ppo", "Pendulum-v1", -172.225)),
    ("apex", "CartPole-v1", ("dqn", "CartPole-v1", 500.0)),
    ("sac", "LunarLanderContinuous-v3", ("sac", "LunarLanderContinuous-v2", 260.390)),
    ("td3", "Ant-v5", ("td3", "Ant-v3", 5813.274)),
    ("a2c", "Walker2d-v5", None),  # RL-Zoo has no A2C Walker2d-v3 row
    ("dqn", "Pendulum-v1", None),
    ("ppo", "FrozenLake-v1", None),
])
def test_each_rlpar_row_is_compared_with_its_own_or_its_nearest_rl_zoo_row(algo, env, expected):
    row = rl_zoo.reference(algo, env)
    assert (None if row is None else (row.algo, row.env, row.mean)) == expected


@pytest.mark.parametrize("value, zoo_mean, ratio", [
    (250.0, 500.0, 0.5), (500.0, 500.0, 1.0), (-50.0, 250.0, -0.2),
    (-220.0, -110.0, 0.5), (-55.0, -110.0, 2.0), (0.0, -110.0, None), (10.0, -110.0, None), (None, 500.0, None),
])
def test_the_ratio_is_above_1_when_better_for_either_sign(value, zoo_mean, ratio):
    assert rl_zoo.ratio(value, zoo_mean) == ratio


def test_the_bar_is_rl_zoos_figure_minus_one_std():
    acrobot = rl_zoo.reference("ppo", "Acrobot-v1")
    assert acrobot.bar == pytest.approx(-73.506 - 18.201)
    assert reached(-91.0, acrobot) is True and reached(-92.0, acrobot) is False
    assert reached(None, acrobot) is None and reached(1.0, None) is None


def test_rows_compared_with_another_algorithms_row_say_so():
    assert _zoo_row({"algo": "impala", "rl_zoo_algo": "ppo", "rl_zoo_env": "LunarLander-v2"}) == \
        "ppo LunarLander-v2 (PPO's row)"
    assert _zoo_row({"algo": "ppo", "rl_zoo_algo": "ppo", "rl_zoo_env": "Hopper-v3"}) == "ppo Hopper-v3"
    assert _zoo_row({"algo": "ppo", "rl_zoo_algo": None, "rl_zoo_env": None}) == "- (RL-Zoo has none)"
    assert _zoo_row({"algo": "appo", "rl_zoo_algo": "ppo", "rl_zoo_env": "PongNoFrameskip-v4",
                     "reference_source": "CleanRL"}) == "CleanRL: ppo PongNoFrameskip-v4 (PPO's row)"
    assert _zoo_row({"algo": "ppo", "rl_zoo_algo": "ppo", "rl_zoo_env": "Hopper-v3",
                     "reference_source": "RL-Zoo"}) == "ppo Hopper-v3"


def test_curve_files_are_named_after_the_row():
    assert curve_name(("ppo", "CartPole-v1", "local", 1)) == "ppo-CartPole-v1.png"
    assert curve_name(("sac", "Hopper-v5", "distributed", 4)) == "sac-Hopper-v5-distributed-4w.png"
    assert curve_name(("ppo", "ALE/Pong-v5", "local", 1)) == "ppo-ALE_Pong-v5.png"
