"""Bring your own algorithm (docs/extending.md): the example, written from the page's own code
blocks into a directory outside the clone, and run from there as a user runs it:

    cd <their dir> && python <clone>/main.py hydra.searchpath=[file://<their dir>/conf] algo=reinforce

Nothing puts the clone or the user's directory on PYTHONPATH: rlpar itself finds `reinforce.py`
in the directory it was started in, on every sampler."""

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

from rlpar.config.compose import compose_config
from rlpar.config.overrides import override_problems
from rlpar.config.validate import ConfigError, validate_config
from tests.processes import left_running

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "reinforce"
EXAMPLE_FILES = ("conf/algo/reinforce.yaml", "reinforce.py")
DOC = ROOT / "docs" / "extending.md"
SMALL = ("workers=2", "envs_per_worker=2", "algo.rollout_length=64")  # 256 env steps an iteration

# An environment of the user's that ends its worker's process once (as an out-of-memory kill
# would): the first of its instances to reach step 30 while `marker` exists removes it and dies.
DYING_CARTPOLE = '''
import os

from gymnasium.envs.classic_control.cartpole import CartPoleEnv


class DiesOnceCartPole(CartPoleEnv):
    def __init__(self, marker):
        super().__init__()
        self.marker, self.steps = marker, 0

    def step(self, action):
        self.steps += 1
        if self.steps >= 30:
            try:
                os.remove(self.marker)  # atomic: one process of all wins
            except FileNotFoundError:
                return super().step(action)
            os._exit(17)
        return super().step(action)
'''


def doc_block(path: str) -> str:
    """The code block of docs/extending.md marked `<!-- path -->` on the line above it."""
    block = DOC.read_text().split(f"<!-- {path} -->\n```", 1)[1].split("\n", 1)[1]
    return block.split("\n```\n", 1)[0] + "\n"


@pytest.fixture
def user_dir(tmp_path) -> Path:
    """The example as a user keeps it, copied from docs/extending.md: their own directory, far
    from the clone."""
    mine = tmp_path / "my_research"
    for path in EXAMPLE_FILES:
        (mine / path).parent.mkdir(parents=True, exist_ok=True)
        (mine / path).write_text(doc_block(f"examples/reinforce/{path}"))
    return mine


def test_the_example_on_the_page_is_the_example_in_the_clone():
    kept = sorted(p.relative_to(EXAMPLE).as_posix() for p in EXAMPLE.rglob("*")
                  if p.is_file() and "__pycache__" not in p.parts)
    assert kept == sorted(EXAMPLE_FILES)
    for path in EXAMPLE_FILES:
        assert doc_block(f"examples/reinforce/{path}") == (EXAMPLE / path).read_text(), path


def user_env() -> dict:
    return {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "RLPAR_LAUNCH_DIR")}


def main_py(user_dir: Path, *overrides: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(ROOT / "main.py"), "progress=false", *overrides], cwd=user_dir,
                          env=user_env(), capture_output=True, text=True, timeout=300)


def train(user_dir: Path, *overrides: str) -> subprocess.CompletedProcess:
    return main_py(user_dir, f"hydra.searchpath=[file://{user_dir / 'conf'}]", "algo=reinforce", *overrides)


def metrics(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


@pytest.mark.slow
@pytest.mark.parametrize("parallel", ["local", "multiprocess", pytest.param("distributed", marks=pytest.mark.ray)])
def test_the_example_trains_from_its_own_directory_on_every_sampler(user_dir, parallel, adopted_orphans):
    proc = train(user_dir, f"parallel={parallel}", *SMALL, "total_steps=1024", "checkpoint.every=2", "run_dir=run")
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = metrics(user_dir / "run")
    assert [r["iteration"] for r in rows] == [1, 2, 3, 4]
    assert [r["env_steps"] for r in rows] == [256, 512, 768, 1024]
    assert all(math.isfinite(r["loss_policy"]) and math.isfinite(r["loss_value"]) for r in rows)
    assert all(0 < r["finished_step_fraction"] <= 1 for r in rows)  # the algorithm's own metric
    assert [r["policy_version"] for r in rows] == [1, 2, 3, 4]  # one update an iteration
    assert rows[-1]["live_workers"] == (1 if parallel == "local" else 2) and rows[-1]["worker_restarts"] == 0
    assert sorted(p.name for p in (user_dir / "run" / "checkpoints").glob("*.pt")) == [
        "checkpoint_00000002.pt", "checkpoint_00000004.pt"]
    assert (user_dir / "run" / "config.yaml").read_text().count("_target_: reinforce.Reinforce") == 1
    assert not left_running({}, adopted_orphans, 30)  # distributed: rlpar's private Ray instance stopped


@pytest.mark.slow
def test_a_resumed_run_continues_exactly_where_it_stopped(user_dir):
    whole = train(user_dir, "total_steps=4800", "run_dir=whole")  # 1,600 env steps an iteration
    assert whole.returncode == 0, whole.stderr[-3000:]
    first = train(user_dir, "total_steps=3200", "checkpoint.every=1", "run_dir=parts")
    assert first.returncode == 0, first.stderr[-3000:]
    resumed = main_py(user_dir, "resume=parts", "total_steps=4800")  # with the run's own config
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    parts, expected = metrics(user_dir / "parts"), metrics(user_dir / "whole")
    assert [r["iteration"] for r in parts] == [1, 2, 3]
    assert [r["env_steps"] for r in parts] == [1600, 3200, 4800]
    for key in ("episode_return_mean", "episodes", "loss_policy", "loss_value", "policy_version"):
        assert [r[key] for r in parts] == [r[key] for r in expected], key


@pytest.mark.slow
@pytest.mark.parametrize("parallel", ["multiprocess", pytest.param("distributed", marks=pytest.mark.ray)])
def test_a_worker_process_that_dies_is_replaced_and_training_goes_on(user_dir, parallel, adopted_orphans):
    (user_dir / "dying_cartpole.py").write_text(DYING_CARTPOLE)
    marker = user_dir / "die-once"
    marker.touch()
    proc = train(user_dir, f"parallel={parallel}", *SMALL, "total_steps=2048", "run_dir=run", "env.id=null",
                 "env.entry_point=dying_cartpole:DiesOnceCartPole", f"+env.kwargs.marker={marker}",
                 "env.max_episode_steps=500")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert not marker.exists()  # a worker died
    rows = metrics(user_dir / "run")
    assert rows[-1]["worker_restarts"] == 1 and rows[-1]["env_steps"] >= 2048
    if parallel == "multiprocess":  # a Ray runner's replacement boots while training goes on
        assert rows[-1]["live_workers"] == 2
    assert [r["policy_version"] for r in rows] == [r["iteration"] for r in rows]  # an update every iteration
    assert not left_running({}, adopted_orphans, 30)


@pytest.mark.slow
def test_an_unknown_key_of_the_algorithm_is_refused_in_one_line(user_dir):
    proc = train(user_dir, "+algo.nonsense=1")
    assert proc.returncode == 2
    assert proc.stderr.strip() == ("rlpar: invalid config: algo.nonsense: unknown key (not taken by reinforce.Reinforce); "
                                   "it takes gamma, lr, max_grad_norm, name, normalize_advantages, normalize_rewards, precision, "
                                   "reward_clip, reward_scale, rollout_length, value_coef")
    assert not (user_dir / "outputs").exists()


@pytest.mark.slow
def test_a_key_the_config_file_does_not_have_is_refused_in_one_line(user_dir):
    """Not advice to add it with `+` (refused next, as above): the refusal itself."""
    proc = train(user_dir, "algo.nonsense=1")
    assert proc.returncode == 2
    assert proc.stderr.strip() == ("rlpar: invalid config: algo.nonsense: unknown key (not taken by reinforce.Reinforce); "
                                   "it takes gamma, lr, max_grad_norm, name, normalize_advantages, normalize_rewards, precision, "
                                   "reward_clip, reward_scale, rollout_length, value_coef")


@pytest.mark.slow
def test_a_misspelt_choice_names_the_users_algorithm_among_the_options(user_dir):
    proc = train(user_dir, "algo=reinforc")
    assert proc.returncode == 2
    assert "did you mean reinforce?" in proc.stderr and "reinforce" in options_named(proc.stderr)
    assert len(proc.stderr.strip().splitlines()) == 1


@pytest.mark.slow
def test_rlpar_train_takes_the_users_algorithm_too(user_dir, tmp_path):
    """The `rlpar` console script, which starts in its bin directory, not the user's; rlpar is
    imported from this clone (PYTHONPATH), the algorithm from the user's directory."""
    script = tmp_path / "bin" / "rlpar"
    script.parent.mkdir()
    script.write_text("import sys\nfrom rlpar.cli import main\nsys.exit(main())\n")
    command = [sys.executable, str(script), "train", f"hydra.searchpath=[file://{user_dir / 'conf'}]",
               "algo=reinforce", "algo.lr=-1"]
    proc = subprocess.run(command, cwd=user_dir, env={**user_env(), "PYTHONPATH": str(ROOT)}, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 2
    assert proc.stderr.strip() == "rlpar: invalid config: algo.lr: -1 is out of range (must be > 0)"


@pytest.mark.slow
def test_rlpar_config_validates_the_users_algorithm_where_training_finds_it(user_dir, tmp_path):
    """`rlpar config` validates before it prints: the user's module is found as `rlpar train` finds it."""
    script = tmp_path / "bin" / "rlpar"
    script.parent.mkdir()
    script.write_text("import sys\nfrom rlpar.cli import main\nsys.exit(main())\n")
    command = [sys.executable, str(script), "config", f"hydra.searchpath=[file://{user_dir / 'conf'}]", "algo=reinforce"]
    proc = subprocess.run(command, cwd=user_dir, env={**user_env(), "PYTHONPATH": str(ROOT)}, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "_target_: reinforce.Reinforce" in proc.stdout


@pytest.mark.slow
def test_reinforce_learns_cartpole(user_dir):
    proc = train(user_dir, "total_steps=20000", "seed=0", "run_dir=run")  # 13 iterations of 1,600 steps
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = metrics(user_dir / "run")
    assert rows[0]["episode_return_mean"] < 40  # a random policy: about 22
    assert rows[-1]["episode_return_best_mean"] > 150


def options_named(message: str) -> list[str]:
    """The options an unknown-choice message lists: `... (one of: a, b, c)`."""
    return message.split("(one of: ")[1].split(")")[0].split(", ")


def test_the_options_of_a_search_path_directory_are_choices(user_dir):
    search_path = f"hydra.searchpath=[file://{user_dir / 'conf'}]"
    assert override_problems([search_path, "algo=reinforce", "algo.lr=0.1"]) == []
    assert override_problems([search_path, "algo=reinforce", "algo.nonsense=1"]) == [
        "algo.nonsense: not a key of the config (add a new key with +algo.nonsense=...)"]
    (problem,) = override_problems([search_path, "algo=reinforc"])
    assert problem.startswith("algo: 'reinforc' is not an option of this config group; did you mean reinforce?")
    (problem,) = override_problems(["algo=reinforce"])  # without the search path: not an option
    assert problem.startswith("algo: 'reinforce' is not an option") and "reinforce" not in options_named(problem)
    assert override_problems(["hydra.searchpath=[pkg://their_package.conf]", "algo=theirs"]) == []  # Hydra's to check


def test_an_algorithm_module_that_cannot_be_found_is_one_problem(user_dir):
    """Started elsewhere than the user's directory: one line saying where rlpar looked, not a
    list of every hyper-parameter rlpar knows as missing."""
    cfg = compose_config([f"hydra.searchpath=[file://{user_dir / 'conf'}]", "algo=reinforce"], run_dir=user_dir / "run")
    with pytest.raises(ConfigError) as refused:
        validate_config(cfg, check_env=False)
    assert refused.value.problems == [
        "algo._target_: cannot find module 'reinforce' (searched: installed packages, PYTHONPATH, and the directory "
        "main.py or `rlpar train` was started in)"]


def test_hydras_config_dir_flag_adds_options_as_the_search_path_does(user_dir):
    assert override_problems(["-cd", str(user_dir / "conf"), "algo=reinforce", "algo.lr=0.1"]) == []
    assert override_problems([f"--config-dir={user_dir / 'conf'}", "algo=reinforce", "algo.nonsense=1"]) == [
        "algo.nonsense: not a key of the config (add a new key with +algo.nonsense=...)"]
