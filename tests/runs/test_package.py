"""rlpar as an installed package: `pip install -e <clone>` into a fresh virtual environment, then,
from another directory, the README's Python API example, the `rlpar` command, and an environment
class of the user's in the current directory (`env.entry_point=my_env:GridEnv`) trained with every
sampler (`parallel=distributed`: rlpar's private Ray instance on 127.0.0.1, started and stopped by
the run).

The fresh environment sees the test environment's packages (torch, Ray, ...) through a .pth
file naming its site-packages, whose own .pth files are not run: this clone's editable install
there stays invisible, so `import rlpar` works only once the fresh environment installs it."""

import ast
import json
import os
import re
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

GRID_ENV = '''
import gymnasium as gym
import numpy as np


class GridEnv(gym.Env):
    """A corridor of `size` cells: walk right to the goal (reward 1)."""

    metadata = {"render_modes": ["rgb_array"], "render_fps": 10}

    def __init__(self, size=5, render_mode=None):
        self.size, self.render_mode = size, render_mode
        self.observation_space = gym.spaces.Box(0.0, 1.0, (size,), np.float32)
        self.action_space = gym.spaces.Discrete(2)

    def _obs(self):
        obs = np.zeros(self.size, np.float32)
        obs[self.pos] = 1.0
        return obs

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.pos, self.t = 0, 0
        return self._obs(), {}

    def step(self, action):
        self.pos = int(np.clip(self.pos + (1 if action == 1 else -1), 0, self.size - 1))
        self.t += 1
        done = self.pos == self.size - 1
        return self._obs(), float(done), done, self.t >= 30, {}

    def render(self):
        frame = np.zeros((16, 16 * self.size, 3), np.uint8)
        frame[:, 16 * self.pos:16 * (self.pos + 1)] = 255
        return frame
'''


def clean_env() -> dict:
    """No PYTHONPATH (rlpar must come from the install) and no Ray cluster to join."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "RAY_ADDRESS", "HYDRA_FULL_ERROR")}
    env.update(PIP_NO_INDEX="1", PIP_DISABLE_PIP_VERSION_CHECK="1", WANDB_MODE="offline",
               RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER="0")
    return env


def call(args, cwd, timeout=300):
    return subprocess.run([str(a) for a in args], cwd=cwd, env=clean_env(), capture_output=True, text=True,
                          timeout=timeout)


@pytest.fixture(scope="module")
def venv(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("package")
    venv = root / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    python = venv / "bin" / "python"
    site = Path(call([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], root).stdout.strip())
    (site / "test_dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    before = call([python, "-c", "import torch, gymnasium, ray; import rlpar"], root)
    assert "No module named 'rlpar'" in before.stderr, before.stderr  # the dependencies, but no rlpar yet
    install = call([python, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation", "-e", ROOT], root)
    assert install.returncode == 0, install.stderr[-3000:]
    assert (venv / "bin" / "rlpar").is_file()
    return venv


def readme_api_example() -> str:
    text = (ROOT / "README.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", text, flags=re.S)
    return next(block for block in blocks if "build_trainer(" in block and "trainer.evaluate(" in block)


@pytest.mark.slow
def test_readme_api_example_from_another_directory(venv, tmp_path):
    check = (
        "\nimport json, rlpar, torch\n"
        "state = torch.load(path, weights_only=True)\n"
        "print('CHECK ' + json.dumps({'rlpar': rlpar.__file__, 'iteration': trainer.iteration,"
        " 'env_steps': trainer.env_steps, 'saved_iteration': state['iteration'], 'path': str(path),"
        " 'metrics_iteration': metrics['iteration'], 'metrics_env_steps': metrics['env_steps']}))\n"
    )
    proc = call([venv / "bin" / "python", "-c", readme_api_example() + check], tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = proc.stdout.strip().splitlines()
    facts = json.loads(lines[-1].removeprefix("CHECK "))
    evaluation = ast.literal_eval(lines[-2])  # print(trainer.evaluate(10))
    assert Path(facts["rlpar"]).resolve() == ROOT / "rlpar" / "__init__.py"  # this clone, through the install
    assert facts["metrics_iteration"] == facts["iteration"] == facts["saved_iteration"] == 1  # one iteration
    assert facts["metrics_env_steps"] == facts["env_steps"] > 0
    checkpoint = tmp_path / "outputs" / "mine" / "checkpoints" / "checkpoint_00000001.pt"
    assert (tmp_path / facts["path"]).resolve() == checkpoint and checkpoint.stat().st_size > 0  # saved here
    rows = (tmp_path / "outputs" / "mine" / "metrics.jsonl").read_text().splitlines()
    assert len(rows) == 1 and json.loads(rows[0])["env_steps"] == facts["env_steps"]
    assert evaluation["eval_episodes"] == 10
    assert -2000 < evaluation["eval_return_min"] <= evaluation["eval_return_mean"] <= evaluation["eval_return_max"] < 0


@pytest.mark.slow
def test_rlpar_command_from_another_directory(venv, tmp_path):
    rlpar = venv / "bin" / "rlpar"
    help_ = call([rlpar, "--help"], tmp_path)
    assert help_.returncode == 0 and help_.stdout.startswith("usage: rlpar")
    assert f"Configs are read from {ROOT / 'conf'}" in help_.stdout

    proc = call([rlpar, "train", "total_steps=1024", "progress=false", "checkpoint.every=0"], tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "ppo preset for CartPole-v1 (conf/preset/ppo/CartPole-v1.yaml)" in proc.stdout
    (run_dir,) = (tmp_path / "outputs").glob("*/*_ppo_CartPole-v1_s0")  # Hydra's run dir, under this directory
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert rows[-1]["env_steps"] >= 1024

    evaluated = call([rlpar, "evaluate", run_dir, "--episodes", "2", "--no-video"], tmp_path)
    assert evaluated.returncode == 0, evaluated.stderr[-3000:]
    assert evaluated.stdout.startswith("returns: ")

    reported = call([rlpar, "report", "outputs"], tmp_path)
    assert reported.returncode == 0, reported.stderr[-3000:]
    assert "CartPole-v1" in (tmp_path / "outputs" / "report.md").read_text()

    refused = call([rlpar, "train", "algo=ppp"], tmp_path)
    assert refused.returncode == 2 and "ppo" in refused.stderr  # a did-you-mean, in one line
    assert "Traceback" not in refused.stderr


@pytest.mark.slow
@pytest.mark.parametrize("parallel", ["local", "multiprocess", pytest.param("distributed", marks=pytest.mark.ray)])
def test_env_class_in_the_current_directory(venv, tmp_path, parallel):
    (tmp_path / "my_env.py").write_text(GRID_ENV)
    extra = ["parallel.start_method=spawn"] if parallel == "multiprocess" else []
    proc = call([venv / "bin" / "rlpar", "train", "env.entry_point=my_env:GridEnv", "env.id=null", f"parallel={parallel}",
                 *extra, "workers=2", "envs_per_worker=2", "total_steps=512", "progress=false", "run_dir=run"],
                tmp_path, timeout=400)
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert rows[-1]["env_steps"] >= 512 and rows[-1]["episodes"] > 0
    if parallel == "distributed":  # a video of the user's own environment too
        evaluated = call([venv / "bin" / "rlpar", "evaluate", "run", "--episodes", "2"], tmp_path)
        assert evaluated.returncode == 0, evaluated.stderr[-3000:]
        assert len(list((tmp_path / "run" / "videos").glob("*.mp4"))) == 1


@pytest.mark.slow
def test_env_class_elsewhere_is_refused_in_one_line(venv, tmp_path):
    """The same command where no my_env.py is: refused before anything starts (exit 2)."""
    proc = call([venv / "bin" / "rlpar", "train", "env.entry_point=my_env:GridEnv", "env.id=null"], tmp_path)
    assert proc.returncode == 2
    assert proc.stderr.strip() == ("rlpar: invalid config: env.entry_point: cannot import 'my_env:GridEnv' "
                                   "(No module named 'my_env')")
