"""Test suites no one here wrote, run on rlpar's own environments: Gymnasium's `check_env` (spaces,
seeding, determinism, the step and reset contract) and PettingZoo's `parallel_api_test`. Their
warnings are failures, except those named here with the reason they stay."""

import warnings

import gymnasium as gym
import pytest
from gymnasium.utils.env_checker import check_env
from pettingzoo.test import parallel_api_test

from rlpar.envs.factory import EnvSpec, make_env, resolve_env_spec
from rlpar.envs.memory import register_memory_envs
from rlpar.envs.pettingzoo import as_parallel_env
from rlpar.envs.toy import register_toy_envs
from tests import multi_agent_envs

register_memory_envs()
register_toy_envs()
RLPAR_IDS = sorted(env_id for env_id in gym.registry if env_id.startswith("rlpar/"))
# Pendulum-v1's own action range, which the velocity-free task keeps; a team's rows hold every
# agent's observation (and padding), so their Box is unbounded.
KEPT_WARNINGS = ("we recommend using a symmetric and normalized space", "observation space minimum value is -infinity",
                 "observation space maximum value is infinity")


def checked(env) -> None:
    """check_env, its render check too where the environment renders frames (videos)."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        check_env(env, skip_render_check=env.render_mode != "rgb_array")
    assert [str(w.message) for w in caught if not any(kept in str(w.message) for kept in KEPT_WARNINGS)] == []


def test_every_rlpar_id_is_registered_here():
    assert {"rlpar/MemoryCue-v0", "rlpar/CartPoleNoVelocity-v1", "rlpar/PixelGridWorld-v0", "rlpar/DictTarget-v0",
            "rlpar/MultiDiscreteMatch-v0", "rlpar/MultiBinaryMatch-v0"} <= set(RLPAR_IDS)


@pytest.mark.parametrize("env_id", RLPAR_IDS)
def test_gymnasiums_check_env_passes_on_the_memory_tasks_and_toy_envs(env_id):
    renders = "rgb_array" in gym.make(env_id).metadata.get("render_modes", [])
    checked(gym.make(env_id, **({"render_mode": "rgb_array"} if renders else {})).unwrapped)


def test_gymnasiums_check_env_passes_on_the_old_gym_adapter():
    checked(make_env(EnvSpec(entry_point="tests.old_gym_envs:OldCorridor", kwargs={"limit": 8})))


@pytest.mark.parametrize("entry_point", ["tests.multi_agent_envs:relay", "tests.multi_agent_envs:Together"])
def test_gymnasiums_check_env_passes_on_the_team_env(entry_point):
    """TeamEnv: a multi-agent environment as one Gymnasium env (evaluation, videos)."""
    checked(make_env(resolve_env_spec(kind="pettingzoo", entry_point=entry_point)))


def test_gymnasiums_check_env_passes_on_the_team_env_of_simple_spread():
    checked(make_env(resolve_env_spec(kind="pettingzoo", id="mpe2.simple_spread_v3")))


@pytest.mark.parametrize("make", [multi_agent_envs.relay, multi_agent_envs.Together, multi_agent_envs.rendezvous,
                                  lambda: as_parallel_env(multi_agent_envs.relay_aec())],
                         ids=["relay", "together", "rendezvous", "relay_aec_as_parallel"])
def test_pettingzoos_parallel_api_test_passes_on_the_test_environments(make):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        parallel_api_test(make(), num_cycles=100)
