"""The published reference figures of `experiment=benchmark`: RL Baselines3 Zoo's, and CleanRL's for Atari.

Each row names its `source` (`RL_ZOO` or `CLEANRL`); the report says which a row is measured against.

Source: DLR-RM/rl-baselines3-zoo, `benchmark.md` ("Performance of trained agents"), at commit
0088472b8cb622732bdbc4aa3d0d0abde86c67ed. Each of its rows is ONE trained agent (one seed),
trained for `n_timesteps` env steps and then run with its deterministic policy for about 150,000
steps (`eval_episodes` episodes); `mean_reward` and `std_reward` are over those episodes, so the
std is the spread of one agent's episodes, not of seeds.

Only the rows of the algorithms and tasks of `experiment=benchmark` are copied here, figures as
published. RL-Zoo measured older versions of some tasks than Gymnasium 1.4 registers, and rlpar
trains the newer ones, so those rows are references, not like-for-like figures:
- LunarLander-v2 and LunarLanderContinuous-v2; rlpar trains -v3 (Gymnasium's version history:
  wind reset at every reset, a non-determinism fixed, wider observation bounds);
- MuJoCo's v3 tasks on mujoco-py; rlpar trains v5 on the `mujoco` bindings (v5 fixes bugs, e.g.
  Hopper's and Walker2d's healthy reward was paid on unhealthy steps too, and changes some
  defaults of a few tasks).

CleanRL (the Atari rows): vwxyzjn/cleanrl, docs/rl-algorithms/ppo.md, "Experiment results" of
`ppo_atari.py` (Open RL Benchmark): the mean +- std over seeds (the std IS a spread over seeds) of
PPO's episodic return, at 10M agent steps = 40M frames, on the NoFrameskip-v4 games without sticky
actions. rlpar's Atari rows train 2.5M agent steps (10M frames, frame skip 4) on ALE's v5 games,
also without sticky actions (conf/env/atari.yaml): a quarter of CleanRL's budget, so the rows are
references, not like-for-like figures. RL-Zoo has no IMPALA or APPO
rows, CleanRL's ppo_atari.py none either: they are set against PPO's, as on the other tasks.
"""

from __future__ import annotations

from dataclasses import dataclass

SOURCE = "DLR-RM/rl-baselines3-zoo, benchmark.md (commit 0088472b8cb6)"
SOURCE_URL = "https://github.com/DLR-RM/rl-baselines3-zoo/blob/0088472b8cb622732bdbc4aa3d0d0abde86c67ed/benchmark.md"
RL_ZOO, CLEANRL = "RL-Zoo", "CleanRL"  # a row's `source`
CLEANRL_SOURCE = 'vwxyzjn/cleanrl, docs/rl-algorithms/ppo.md, "Experiment results" of ppo_atari.py'
CLEANRL_URL = "https://docs.cleanrl.dev/rl-algorithms/ppo/#ppo_ataripy"


@dataclass(frozen=True)
class ZooRow:
    """One reference row: `env` as its source names it; `eval_episodes` None where the figure is
    not an evaluation's (CleanRL's: training episodes, over seeds)."""

    algo: str
    env: str
    mean: float
    std: float
    n_timesteps: int
    eval_episodes: int | None
    source: str = RL_ZOO

    @property
    def bar(self) -> float:
        """The figure minus one of its standard deviations: the return a row must reach (issue 29)."""
        return self.mean - self.std


K, M = 1_000, 1_000_000

# algo, RL-Zoo's env id, mean_reward, std_reward, n_timesteps, eval_episodes; as published.
ROWS = tuple(
    ZooRow(*row)
    for row in (
        # classic control
        ("a2c", "CartPole-v1", 500.000, 0.000, 500 * K, 300),
        ("dqn", "CartPole-v1", 500.000, 0.000, 50 * K, 300),
        ("ppo", "CartPole-v1", 500.000, 0.000, 100 * K, 300),
        ("a2c", "Acrobot-v1", -83.353, 17.213, 500 * K, 1778),
        ("dqn", "Acrobot-v1", -76.639, 11.752, 100 * K, 1932),
        ("ppo", "Acrobot-v1", -73.506, 18.201, 1 * M, 2013),
        ("a2c", "MountainCar-v0", -111.263, 24.087, 1 * M, 1348),
        ("dqn", "MountainCar-v0", -100.849, 9.925, 120 * K, 1487),
        ("ppo", "MountainCar-v0", -110.423, 19.473, 1 * M, 1358),
        ("a2c", "MountainCarContinuous-v0", 91.166, 0.255, 100 * K, 1659),
        ("ppo", "MountainCarContinuous-v0", 88.343, 2.572, 20 * K, 633),
        ("sac", "MountainCarContinuous-v0", 94.679, 1.134, 50 * K, 1443),
        ("td3", "MountainCarContinuous-v0", 93.483, 0.075, 300 * K, 2275),
        ("a2c", "Pendulum-v1", -162.965, 103.210, 1 * M, 750),
        ("ppo", "Pendulum-v1", -172.225, 104.159, 100 * K, 750),
        ("sac", "Pendulum-v1", -156.995, 88.714, 20 * K, 750),
        ("td3", "Pendulum-v1", -151.855, 90.227, 20 * K, 750),
        # Box2D
        ("a2c", "LunarLander-v2", 155.751, 80.419, 200 * K, 297),
        ("dqn", "LunarLander-v2", 154.382, 79.241, 100 * K, 200),
        ("ppo", "LunarLander-v2", 242.119, 31.823, 1 * M, 369),
        ("a2c", "LunarLanderContinuous-v2", 84.225, 145.906, 5 * M, 256),
        ("ppo", "LunarLanderContinuous-v2", 270.863, 32.072, 1 * M, 526),
        ("sac", "LunarLanderContinuous-v2", 260.390, 65.467, 500 * K, 672),
        ("td3", "LunarLanderContinuous-v2", 207.451, 67.562, 300 * K, 337),
        ("a2c", "BipedalWalker-v3", 299.754, 23.459, 5 * M, 208),
        ("ppo", "BipedalWalker-v3", 213.299, 129.490, 5 * M, 233),
        ("sac", "BipedalWalker-v3", 297.668, 33.060, 500 * K, 136),
        ("td3", "BipedalWalker-v3", 305.990, 56.886, 1 * M, 224),
        # MuJoCo (RL-Zoo: v3 tasks on mujoco-py; no a2c row for Walker2d-v3 or Ant-v3)
        ("a2c", "Hopper-v3", 733.454, 376.574, 1 * M, 580),
        ("ppo", "Hopper-v3", 2410.435, 10.026, 1 * M, 150),
        ("sac", "Hopper-v3", 2325.547, 1129.676, 1 * M, 236),
        ("td3", "Hopper-v3", 3606.390, 4.027, 1 * M, 150),
        ("a2c", "HalfCheetah-v3", 3041.174, 157.265, 1 * M, 150),
        ("ppo", "HalfCheetah-v3", 5819.099, 663.530, 1 * M, 150),
        ("sac", "HalfCheetah-v3", 9535.451, 100.470, 1 * M, 150),
        ("td3", "HalfCheetah-v3", 9655.666, 969.916, 1 * M, 150),
        ("ppo", "Walker2d-v3", 3478.798, 821.708, 1 * M, 171),
        ("sac", "Walker2d-v3", 3863.203, 254.347, 1 * M, 150),
        ("td3", "Walker2d-v3", 4717.823, 46.303, 1 * M, 150),
        ("a2c", "Swimmer-v3", 200.627, 2.544, 1 * M, 150),
        ("ppo", "Swimmer-v3", 281.561, 9.671, 1 * M, 150),
        ("sac", "Swimmer-v3", 345.568, 3.084, 1 * M, 150),
        ("td3", "Swimmer-v3", 359.127, 1.244, 1 * M, 150),
        ("ppo", "Ant-v3", 1327.158, 451.577, 1 * M, 175),
        ("sac", "Ant-v3", 4615.791, 1354.111, 1 * M, 165),
        ("td3", "Ant-v3", 5813.274, 589.773, 1 * M, 151),
    )
)

# CleanRL's ppo_atari.py: algo, the NoFrameskip-v4 id, mean and std over seeds, agent steps (x4 frames).
CLEANRL_ROWS = tuple(
    ZooRow(algo, env, mean, std, n_timesteps, None, CLEANRL)
    for algo, env, mean, std, n_timesteps in (
        ("ppo", "PongNoFrameskip-v4", 20.36, 0.20, 10 * M),
        ("ppo", "BreakoutNoFrameskip-v4", 414.66, 28.09, 10 * M),
        ("ppo", "BeamRiderNoFrameskip-v4", 1915.93, 484.58, 10 * M),
    )
)

REFERENCE_ROWS = (*ROWS, *CLEANRL_ROWS)  # every reference row: RL-Zoo's, then CleanRL's

# The Gymnasium 1.4 id rlpar trains -> the id of the reference's row (ids not listed are the same in both).
ZOO_ENV = {
    "LunarLander-v3": "LunarLander-v2",
    "LunarLanderContinuous-v3": "LunarLanderContinuous-v2",  # Gymnasium 1.4: LunarLander-v3 with continuous=True
    "Hopper-v5": "Hopper-v3",
    "HalfCheetah-v5": "HalfCheetah-v3",
    "Walker2d-v5": "Walker2d-v3",
    "Swimmer-v5": "Swimmer-v3",
    "Ant-v5": "Ant-v3",
    "ALE/Pong-v5": "PongNoFrameskip-v4",  # CleanRL's: v4 without sticky actions
    "ALE/Breakout-v5": "BreakoutNoFrameskip-v4",
    "ALE/BeamRider-v5": "BeamRiderNoFrameskip-v4",
}

# rlpar algorithms RL-Zoo has no row for, compared against their nearest one's: IMPALA and APPO
# (actor-critics with V-trace) against PPO, Ape-X (distributed prioritised DQN) against DQN, the
# Ape-X-style SAC and TD3 (SAC's and TD3's learners on replay shards) against SAC's and TD3's. Runs
# from before algo=apex_sac existed (algo=sac with parallel=distributed) are SAC's, against SAC's row.
NEAREST_ALGO = {"impala": "ppo", "appo": "ppo", "apex": "dqn", "apex_sac": "sac", "apex_td3": "td3"}


def zoo_env(env_id: str | None) -> str | None:
    """RL-Zoo's name for a Gymnasium id."""
    return ZOO_ENV.get(env_id, env_id) if env_id else None


def zoo_algo(algo_name: str | None) -> str | None:
    """The RL-Zoo algorithm an rlpar algorithm is compared against (itself where RL-Zoo has it)."""
    return NEAREST_ALGO.get(algo_name, algo_name) if algo_name else None


def reference(algo_name: str | None, env_id: str | None) -> ZooRow | None:
    """The reference row for an rlpar (algo.name, env.id), RL-Zoo's or CleanRL's, or None where neither has one."""
    algo, env = zoo_algo(algo_name), zoo_env(env_id)
    return next((row for row in REFERENCE_ROWS if row.algo == algo and row.env == env), None)


def ratio(value: float | None, zoo_mean: float) -> float | None:
    """rlpar's return against RL-Zoo's, above 1 better and below 1 worse for either sign of reward:
    rlpar / RL-Zoo where RL-Zoo's figure is positive, RL-Zoo / rlpar where it is negative (-220
    against RL-Zoo's -110 is 0.5). None where it means nothing: no value, a zero, or a negative
    RL-Zoo figure against a return of 0 or more (better than RL-Zoo, by no meaningful factor)."""
    if value is None or zoo_mean == 0:
        return None
    if zoo_mean > 0:
        return value / zoo_mean
    return zoo_mean / value if value < 0 else None
