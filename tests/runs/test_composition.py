"""The config that runs is the config you see: presets chosen while composing, `--cfg job` and
`rlpar config` printing it, an entry point never given another environment's preset, Hydra's own
flags, the shared algorithm keys, and every way of starting a run writing the same run directory."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from omegaconf import OmegaConf

from rlpar.config.compose import compose_config
from tests.defaults import STEPS_PER_ITERATION

ROOT = Path(__file__).resolve().parents[2]
ALGOS = ["a2c", "a3c", "apex", "appo", "async_dqn", "dqn", "impala", "ppo", "ippo", "mappo"]
USER_ENV = '''
import gymnasium as gym
import numpy as np


class GridEnv(gym.Env):
    """A user's environment: walk right along a line of 5 cells."""
    observation_space = gym.spaces.Box(0.0, 4.0, (1,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.x = 0
        return np.array([self.x], np.float32), {}

    def step(self, action):
        self.x = min(max(self.x + (1 if action else -1), 0), 4)
        return np.array([self.x], np.float32), float(self.x == 4), self.x == 4, False, {}
'''


def main_py(*args, cwd=ROOT, env=None):
    return subprocess.run([sys.executable, str(ROOT / "main.py"), *args], cwd=cwd, capture_output=True, text=True,
                          env={**os.environ, **(env or {})})


def test_dqn_composes_with_its_cartpole_preset_and_an_untuned_env_with_the_baseline():
    dqn = compose_config(["algo=dqn"])
    assert (dqn.algo.lr, dqn.algo.n_step, dqn.model.dueling, dqn.total_steps) == (2.0e-3, 3, True, 60000)
    acrobot = compose_config(["env.id=Acrobot-v1"])
    assert (acrobot.algo.lr, acrobot.algo.epochs, acrobot.total_steps) == (3.0e-4, 10, 100000)
    baseline = compose_config(["preset=null"])  # presets off: CartPole with PPO's baseline
    assert (baseline.env.id, baseline.algo.lr, baseline.algo.rollout_length) == ("CartPole-v1", 3.0e-4, 128)


def test_what_comes_after_the_preset_wins_over_it():
    """The command line and `@package _global_` options (an experiment, a table row) keep their
    values; the rest of the preset still applies."""
    cfg = compose_config(["algo=dqn", "algo.lr=0.01", "model.dueling=false"])
    assert (cfg.algo.lr, cfg.model.dueling, cfg.algo.n_step) == (0.01, False, 3)
    scaling = compose_config(["experiment=scaling"])  # its env is Pendulum: Pendulum's preset, under the experiment's keys
    assert (scaling.env.id, scaling.algo.lr, scaling.algo.rollout_length, scaling.total_steps) == (
        "Pendulum-v1", 3.0e-3, 256, 32768)


def test_an_entry_point_without_an_id_has_no_id_and_no_preset():
    cfg = compose_config(["env.entry_point=my_env:GridEnv"])
    assert cfg.env.id is None
    assert (cfg.algo.lr, cfg.total_steps) == (3.0e-4, 100000)  # PPO's baseline, not CartPole's preset
    both = compose_config(["env.entry_point=my_env:GridEnv", "env.id=CartPole-v1"])  # the user's own choice
    assert both.env.id == "CartPole-v1"


def test_a_recurrent_model_without_an_environment_preset_takes_the_algorithms_recurrent_preset():
    """conf/preset/dqn/recurrent.yaml: where no environment's preset applies; an environment's
    own preset wins; a feed-forward model and an algorithm without one keep the baseline."""
    entry = "env.entry_point=my_env:GridEnv"
    recurrent = compose_config(["algo=dqn", entry, "model.recurrent=lstm"])
    assert (recurrent.algo.lr, recurrent.algo.anneal_lr, recurrent.algo.n_step, recurrent.model.dueling) == (
        2.0e-3, True, 3, True)
    assert compose_config(["algo=dqn", entry]).algo.lr == 1.0e-4
    assert compose_config(["algo=dqn", "model.recurrent=gru"]).total_steps == 60000  # CartPole-v1's own preset
    assert compose_config(["algo=impala", entry, "model.recurrent=lstm"]).algo.lr == 1.0e-3
    assert compose_config(["algo=dqn", entry, "model.recurrent=lstm", "preset=null"]).algo.lr == 1.0e-4


@pytest.mark.parametrize("algo", ALGOS)
def test_shared_algorithm_keys_leave_every_algorithm_as_it_was(algo):
    """conf/algo/shared/learner.yaml holds the keys every algorithm has with one default; each
    algorithm composes to exactly the values its own file held before (tests/algo_baselines.json)."""
    before = json.loads((ROOT / "tests" / "algo_baselines.json").read_text())[algo]
    cfg = compose_config([f"algo={algo}", "preset=null"], run_dir="/x")
    assert OmegaConf.to_container(cfg.algo, resolve=True) == before["algo"]
    assert OmegaConf.to_container(cfg.model, resolve=True) == before["model"]
    shared = yaml.safe_load((ROOT / "conf" / "algo" / "shared" / "learner.yaml").read_text())
    own = yaml.safe_load((ROOT / "conf" / "algo" / f"{algo}.yaml").read_text())
    copied = {key for key in set(shared) & set(own) if own[key] == shared[key]}
    assert not copied, f"shared keys copied into the algorithm's file (set them there only to change them): {copied}"


@pytest.mark.slow
def test_cfg_job_and_rlpar_config_print_what_compose_config_runs():
    shown = main_py("algo=dqn", "--cfg", "job")
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout == OmegaConf.to_yaml(compose_config(["algo=dqn"]))
    config = rlpar_config("algo=dqn", "--unresolved")
    assert (config.returncode, config.stdout) == (0, shown.stdout)
    resolved = rlpar_config("algo=dqn", "workers=3")  # resolved by default: envs_per_worker is ceil(8 / 3)
    assert resolved.returncode == 0, resolved.stderr
    assert "${" not in resolved.stdout and yaml.safe_load(resolved.stdout)["envs_per_worker"] == 3
    assert resolved.stdout == main_py("algo=dqn", "workers=3", "--cfg", "job", "--resolve").stdout
    acrobot = yaml.safe_load(main_py("env.id=Acrobot-v1", "--cfg", "job").stdout)
    assert (acrobot["algo"]["lr"], acrobot["total_steps"]) == (3.0e-4, 100000)


def rlpar_config(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "rlpar", "config", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=120)


@pytest.mark.slow
def test_rlpar_config_refuses_a_config_that_training_would_refuse():
    refused = rlpar_config("algo=dqn", "env=pendulum")
    assert (refused.returncode, refused.stdout) == (2, "")
    assert refused.stderr.startswith("rlpar: invalid config: env: algo=dqn (a Q-network) cannot take Pendulum-v1's Box")
    assert len(refused.stderr.strip().splitlines()) == 1


def test_rlpar_config_refuses_a_sweep_in_one_line():
    from rlpar.cli import main

    with pytest.raises(SystemExit) as exited:
        main(["config", "-m", "seed=1,2"])
    assert exited.value.code == 2


@pytest.mark.slow
@pytest.mark.parametrize("flags", [["-sc", "install=bash"], ["--help"], ["--hydra-help"], ["--info", "defaults"],
                                   ["-c", "job", "-p", "algo", "algo=dqn"]])
def test_hydras_own_flags_work(flags):
    done = main_py(*flags)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip()


@pytest.mark.slow
def test_a_users_entry_point_trains_without_cartpoles_preset_and_its_config_names_no_cartpole(tmp_path):
    (tmp_path / "my_env.py").write_text(USER_ENV)
    done = main_py("env.entry_point=my_env:GridEnv", f"total_steps={STEPS_PER_ITERATION}", "progress=false",
                   f"run_dir={tmp_path / 'run'}", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "rlpar: no tuned ppo preset for my_env:GridEnv" in done.stdout
    config = (tmp_path / "run" / "config.yaml").read_text()
    assert "CartPole" not in config and yaml.safe_load(config)["env"]["id"] is None


@pytest.mark.slow
def test_a_sweep_over_algorithms_runs_each_with_its_own_preset(tmp_path):
    done = main_py("-m", "algo=ppo,dqn", "total_steps=512", "progress=false", "checkpoint.every=0",
                   f"hydra.sweep.dir={tmp_path}")
    assert done.returncode == 0, done.stderr
    lrs = [yaml.safe_load((tmp_path / str(job) / "config.yaml").read_text())["algo"]["lr"] for job in (0, 1)]
    assert lrs == [3.0e-3, 2.0e-3]  # PPO's and DQN's CartPole presets
    assert "rlpar: dqn preset for CartPole-v1" in done.stdout


@pytest.mark.slow
def test_import_rlpar_is_cheap_and_offers_the_python_api():
    probe = ("import sys, rlpar; heavy = [m for m in ('torch', 'hydra', 'ray') if m in sys.modules]; "
             "from rlpar import compose_config, build_trainer; print(heavy, callable(compose_config), callable(build_trainer))")
    done = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True)
    assert done.stdout.strip() == "[] True True", done.stderr


def test_a_python_api_run_writes_the_run_directory_that_evaluate_reads(tmp_path):
    """The README's way: build_trainer(compose_config(...)), train(), save(): config.yaml, the
    run directory's lock while the trainer lives, and a directory `rlpar evaluate` accepts."""
    from rlpar import build_trainer, compose_config as compose
    from rlpar.runtime import run_lock
    from rlpar.runtime.evaluate_run import evaluate_run

    run_dir = tmp_path / "mine"
    trainer = build_trainer(compose(["progress=false"], run_dir=run_dir))
    try:
        assert run_lock.holds(run_dir)
        trainer.train()
        trainer.save()
    finally:
        trainer.close()
    assert not run_lock.holds(run_dir)
    assert yaml.safe_load((run_dir / "config.yaml").read_text())["run_dir"] == str(run_dir)
    result = evaluate_run(run_dir, episodes=2, video_episodes=0, tensorboard=False)
    assert len(result["returns"]) == 2


@pytest.mark.slow
def test_a_run_directory_held_by_another_process_is_refused_to_the_python_api(tmp_path):
    from rlpar import build_trainer
    from rlpar.runtime.run_lock import RunDirInUseError

    run_dir = tmp_path / "held"
    holder = subprocess.Popen([sys.executable, "-c", "import sys; from rlpar.runtime import run_lock; "
                               f"run_lock.acquire({str(run_dir)!r}, new_run=True); print('held', flush=True); sys.stdin.read()"],
                              cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(RunDirInUseError, match="in use by process"):
            build_trainer(compose_config(["progress=false"], run_dir=run_dir))
    finally:
        holder.stdin.close()
        holder.wait()


@pytest.mark.slow
def test_resuming_a_finished_run_says_it_is_finished(tmp_path):
    run_dir = tmp_path / "run"
    first = main_py(f"total_steps={STEPS_PER_ITERATION}", "progress=false", f"run_dir={run_dir}")
    assert first.returncode == 0, first.stderr
    again = main_py(f"resume={run_dir}", f"hydra.run.dir={tmp_path / 'h'}")
    assert again.returncode == 0, again.stderr
    assert (f"rlpar: {run_dir} is already finished: {STEPS_PER_ITERATION:,} of {STEPS_PER_ITERATION:,} env steps"
            in again.stdout)
