"""An environment whose simulator is not installed (MuJoCo, Box2D) is refused up front in one line
naming the package to install, with requirements.txt's pin, instead of Gymnasium's
DependencyNotInstalled from inside `gym.make` (which names `gymnasium[mujoco]`, other versions).

In-process, `sys.modules[name] = None` makes `import name` raise ImportError; in a subprocess, a
directory holding a `mujoco` package that raises ImportError comes first on PYTHONPATH, so the
real Gymnasium meets a missing MuJoCo exactly as on a machine without it."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from rlpar.envs import factory
from rlpar.envs.factory import check_env_exists, resolve_env_spec

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("env_id, module, simulator, pin", [
    ("Hopper-v5", "mujoco", "MuJoCo", "mujoco==4.0.0"),
    ("Ant-v4", "mujoco", "MuJoCo", "mujoco==4.0.0"),
    ("LunarLander-v3", "Box2D", "Box2D", "box2d==2.3.10"),
    ("LunarLanderContinuous-v3", "Box2D", "Box2D", "box2d==2.3.10"),
    ("CarRacing-v3", "Box2D", "Box2D", "box2d==2.3.10"),
])
def test_a_missing_simulator_is_named_in_one_line_with_its_pin(monkeypatch, env_id, module, simulator, pin):
    monkeypatch.setitem(sys.modules, module, None)  # `import mujoco` now raises ImportError
    problem = check_env_exists(resolve_env_spec(id=env_id))
    assert problem is not None and "\n" not in problem
    assert problem.startswith(f"env.id: '{env_id}' needs {simulator}, which is not installed (pip install {pin}; ")


def test_installed_simulators_and_other_environments_pass():
    pytest.importorskip("mujoco", reason="mujoco is not installed (requirements.txt pins it)")
    pytest.importorskip("Box2D", reason="box2d is not installed (requirements.txt pins it)")
    for env_id in ("Hopper-v5", "LunarLander-v3", "CartPole-v1", "Pendulum-v1"):
        assert check_env_exists(resolve_env_spec(id=env_id)) is None


def test_the_pins_named_are_requirements_txt_pins():
    pins = {line.split("#")[0].strip() for line in (ROOT / "requirements.txt").read_text().splitlines()}
    for _, _, _, pin in factory.SIMULATOR_PACKAGES:
        assert pin in pins, f"{pin} is not pinned in requirements.txt"


@pytest.mark.slow
def test_a_run_on_a_machine_without_mujoco_is_refused_in_one_line(tmp_path):
    broken = tmp_path / "site" / "mujoco"
    broken.mkdir(parents=True)
    (broken / "__init__.py").write_text("raise ImportError('No module named mujoco (simulated)')\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(tmp_path / "site"), os.environ.get("PYTHONPATH")]))}
    proc = subprocess.run([sys.executable, str(ROOT / "main.py"), "env.id=Hopper-v5", "progress=false",
                           f"run_dir={tmp_path / 'run'}"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert proc.stderr.strip() == ("rlpar: invalid config: env.id: 'Hopper-v5' needs MuJoCo, which is not installed "
                                   "(pip install mujoco==4.0.0; ImportError: No module named mujoco (simulated))")
    assert not (tmp_path / "run").exists()
