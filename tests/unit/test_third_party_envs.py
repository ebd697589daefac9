"""Gymnasium ids from packages rlpar does not know, found where environments are built, and the
wrappers (env.wrappers) that make their spaces ones rlpar takes.

Packages are real installed distributions made in a temporary directory on sys.path: a module
beside its `.dist-info` (METADATA, entry_points.txt, top_level.txt), as pip leaves them."""

import importlib
import subprocess
import sys
import time
import uuid

import gymnasium as gym
import pytest

from rlpar.envs.factory import check_env_exists, make_env, make_vector_env, resolve_env_spec
from tests.conftest import ROOT

CARTPOLE = "gymnasium.envs.classic_control.cartpole:CartPoleEnv"


def installed_package(root, *, body: str, entry_points: str = "", requires_gymnasium: bool = False, name=None) -> str:
    """Install a one-module distribution under `root`; returns its (unique) module name."""
    name = name or f"thirdparty_{uuid.uuid4().hex[:10]}"
    (root / f"{name}.py").write_text(f"import gymnasium as gym\n\n{body}\n")
    info = root / f"{name}-1.0.dist-info"
    info.mkdir()
    requires = "Requires-Dist: gymnasium>=1.0\n" if requires_gymnasium else ""
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n{requires}")
    (info / "top_level.txt").write_text(f"{name}\n")
    if entry_points:
        (info / "entry_points.txt").write_text(entry_points.replace("MODULE", name))
    importlib.invalidate_caches()
    return name


@pytest.fixture
def site(tmp_path, monkeypatch):
    """A directory on sys.path that plays site-packages (spawned workers inherit sys.path)."""
    monkeypatch.syspath_prepend(str(tmp_path))
    return tmp_path


def test_module_colon_id_imports_the_module_first(site):
    module = installed_package(site, body=f'gym.register("Colon{site.name}-v0", entry_point="{CARTPOLE}")')
    spec = resolve_env_spec(id=f"{module}:Colon{site.name}-v0")
    assert (spec.id, spec.imports) == (f"Colon{site.name}-v0", (module,))
    assert check_env_exists(spec) is None
    assert make_env(spec).observation_space.shape == (4,)


@pytest.mark.parametrize("declared", ["[gymnasium.envs]\nPLUGIN = MODULE:register_envs\n",  # Gymnasium 0.26-0.29's form
                                      "[gymnasium.envs.PLUGIN]\nanything = MODULE:register_envs\n"])
def test_plugin_entry_point_registers_an_id_in_its_namespace(site, declared):
    namespace = f"Plugin{uuid.uuid4().hex[:8]}"
    installed_package(site, body=f'def register_envs():\n    gym.register("Corridor-v0", entry_point="{CARTPOLE}")',
                      entry_points=declared.replace("PLUGIN", namespace))
    spec = resolve_env_spec(id=f"{namespace}/Corridor-v0")
    assert check_env_exists(spec) is None
    assert f"{namespace}/Corridor-v0" in gym.registry


def test_root_plugin_entry_point_registers_an_id(site):
    env_id = f"Root{uuid.uuid4().hex[:8]}-v0"  # highway-env declares its ids so
    installed_package(site, body=f'def register_envs():\n    gym.register("{env_id}", entry_point="{CARTPOLE}")',
                      entry_points="[gymnasium.envs.__root__]\nmy-package = MODULE:register_envs\n")
    assert check_env_exists(resolve_env_spec(id=env_id)) is None


def test_namespace_of_an_id_names_the_module_that_registers_it(site):
    module = installed_package(site, body=f'gym.register(__name__ + "/Corridor-v0", entry_point="{CARTPOLE}")')
    assert check_env_exists(resolve_env_spec(id=f"{module}/Corridor-v0")) is None  # as gymnasium_2048/TwentyFortyEight-v0


def test_installed_package_that_depends_on_gymnasium_registers_its_id_on_import(site):
    module = f"discovered_{uuid.uuid4().hex[:8]}"
    env_id = f"{module.replace('_', '')}-v0"  # tried first: the package whose name is nearest the id
    installed_package(site, body=f'gym.register("{env_id}", entry_point="{CARTPOLE}")', requires_gymnasium=True,
                      name=module)
    assert check_env_exists(resolve_env_spec(id=env_id)) is None
    assert module in sys.modules


@pytest.mark.slow  # every installed package that depends on Gymnasium is imported first
def test_unknown_id_is_one_line_naming_env_imports_and_entry_point():
    problem = check_env_exists(resolve_env_spec(id="NoSuchPackageEnv-v0"))
    assert "\n" not in problem
    assert "env.imports=[package]" in problem and "env.entry_point=module:Class" in problem


def test_env_imports_that_cannot_be_imported_are_named():
    problem = check_env_exists(resolve_env_spec(id="CartPole-v1", imports=["no_such_module_here"]))
    assert problem.startswith("env.imports: cannot import 'no_such_module_here' (ModuleNotFoundError")


@pytest.mark.slow
def test_env_imports_happen_in_spawned_worker_processes(site, make_cfg):
    """Spawned workers start with Gymnasium's own ids only: each imports env.imports itself."""
    from rlpar.runtime.build import build_trainer

    env_id = f"Imported{uuid.uuid4().hex[:8]}-v0"
    module = installed_package(site, body=f'gym.register("{env_id}", entry_point="{CARTPOLE}")')
    trainer = build_trainer(make_cfg(f"env.id={env_id}", f"env.imports=[{module}]", "parallel=multiprocess",
                                     "parallel.start_method=spawn", "workers=2", "envs_per_worker=1",
                                     "algo.rollout_length=16", "algo.minibatch_size=32"))
    try:
        assert trainer.train()["env_steps"] == 32
    finally:
        trainer.close()


def test_wrappers_are_applied_in_order_and_keep_native_vectorisation_off():
    spec = resolve_env_spec(id="CartPole-v1", wrappers=[
        {"_target_": "gymnasium.wrappers.TimeLimit", "max_episode_steps": 3}, "gymnasium.wrappers.RecordEpisodeStatistics"])
    env = make_env(spec)
    assert isinstance(env, gym.wrappers.RecordEpisodeStatistics) and isinstance(env.env, gym.wrappers.TimeLimit)
    assert env.env._max_episode_steps == 3
    venv = make_vector_env(spec, 2)
    assert isinstance(venv, gym.vector.SyncVectorEnv)
    venv.close()


def test_wrapper_targets_are_checked_one_line_each():
    problem = check_env_exists(resolve_env_spec(id="CartPole-v1", wrappers=["no_such_module.Wrap", "gymnasium.Env",
                                                                             "gymnasium.wrappers.FlattenObservation"]))
    assert problem.startswith("env.wrappers[0]: cannot import 'no_such_module.Wrap'")
    assert "env.wrappers[1]: 'gymnasium.Env' is not a gymnasium.Wrapper class" in problem
    assert "wrappers[2]" not in problem
    native = check_env_exists(resolve_env_spec(id="CartPole-v1", vectorization="native",
                                               wrappers=["gymnasium.wrappers.FlattenObservation"]))
    assert native.startswith("env.vectorization: native vector envs are built whole, without env.wrappers")


def test_text_observation_is_refused_naming_a_filter_of_the_keys_rlpar_takes():
    from rlpar.envs.factory import EnvSpec
    from rlpar.envs.probe import probe_env

    problem = probe_env(EnvSpec(entry_point="tests.third_party_envs:TextAndImage"), steps=0).problem
    assert "unsupported observation space Text" in problem
    assert "env.wrappers=[{_target_: gymnasium.wrappers.FilterObservation, filter_keys: [image]}]" in problem


def test_minigrid_id_with_its_image_wrapper_gives_an_image():
    spec = resolve_env_spec(id="MiniGrid-DoorKey-5x5-v0", wrappers=["minigrid.wrappers.ImgObsWrapper"])
    assert check_env_exists(spec) is None
    assert make_env(spec).observation_space == gym.spaces.Box(0, 255, (7, 7, 3), "uint8")


@pytest.mark.slow
def test_minigrid_without_a_wrapper_exits_2_in_one_line_naming_its_wrappers(tmp_path):
    started = time.monotonic()
    proc = subprocess.run([sys.executable, "main.py", "env.id=MiniGrid-DoorKey-5x5-v0", f"hydra.run.dir={tmp_path}"],
                          cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert time.monotonic() - started < 10
    assert proc.returncode == 2, proc.stderr
    lines = (proc.stdout + proc.stderr).strip().splitlines()
    assert len(lines) == 1 and "env.wrappers=[minigrid.wrappers.ImgObsWrapper]" in lines[0], lines
    assert "minigrid.wrappers.FlatObsWrapper" in lines[0]


def test_id_of_a_known_package_not_installed_says_what_to_install():
    problem = check_env_exists(resolve_env_spec(id="FlappyBird-v0"))
    assert problem == ("env.id: 'FlappyBird-v0' comes from the flappy-bird-gymnasium package, which is not installed "
                       "(pip install flappy-bird-gymnasium)")
