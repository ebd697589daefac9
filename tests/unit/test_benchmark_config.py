"""experiment=benchmark: its rows (the table conf/benchmark/rows.csv, each a `benchmark_row`
option) hold RL Baselines3 Zoo's budgets (rlpar/analysis/rl_zoo.py; the Atari rows a quarter of
CleanRL's, in agent steps), its sub-tables (conf/benchmark/) cover every row once, the sweep expands
to rows x seeds 0-2 as Hydra's basic sweeper expands it, and a row composes to its algorithm,
environment (the Atari rows with env=atari), parallel mode and budget over the preset."""

import pytest
from hydra import compose, initialize_config_dir
from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
from hydra.core.override_parser.overrides_parser import OverridesParser

from rlpar.analysis import rl_zoo
from rlpar.config import benchmark_rows
from rlpar.config.compose import compose_config
from rlpar.config.conf_dir import CONF_DIR

TABLES = ("classic", "box2d", "mujoco", "atari")
ENVS = {
    "classic": {"CartPole-v1", "Acrobot-v1", "MountainCar-v0", "MountainCarContinuous-v0", "Pendulum-v1"},
    "box2d": {"LunarLander-v3", "LunarLanderContinuous-v3", "BipedalWalker-v3"},
    "mujoco": {"Hopper-v5", "HalfCheetah-v5", "Walker2d-v5", "Swimmer-v5", "Ant-v5"},
    "atari": {"ALE/Pong-v5", "ALE/Breakout-v5", "ALE/BeamRider-v5"},
}
FRAME_SKIP = 4  # conf/env/atari.yaml: CleanRL's 10M agent steps are 40M frames, the Atari rows' 2.5M are 10M
DISTRIBUTED = {"impala", "appo", "apex", "apex_sac"}  # rows run on Ray actors
RL_ZOO_ALGOS = ("ppo", "a2c", "dqn", "sac", "td3")
SAC_WRITTEN = (CONF_DIR / "algo" / "sac.yaml").is_file() and (CONF_DIR / "algo" / "td3.yaml").is_file()
needs_sac = pytest.mark.skipif(not SAC_WRITTEN, reason="conf/algo/sac.yaml and td3.yaml are not written yet")


def row_files() -> dict[str, dict]:
    """The table's rows by name, each as the config it composes (`defaults`, env.id, workers, ...)."""
    return {name: benchmark_rows.row_config(row) for name, row in benchmark_rows.rows().items()}


def sweep_jobs(*overrides: str) -> tuple[list[list[str]], str]:
    """The jobs `python main.py -m experiment=benchmark <overrides>` launches, expanded by Hydra's
    BasicSweeper from the composed `hydra.sweeper.params` and the command line; and the sweep dir."""
    parser = OverridesParser.create()
    plain = [text for text, parsed in zip(overrides, parser.parse_overrides(list(overrides)))
             if not parsed.is_sweep_override()]  # composing takes no sweep; the sweeper expands it
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        cfg = compose(config_name="config", overrides=["experiment=benchmark", *plain], return_hydra_config=True)
    params = [f"{key}={value}" for key, value in cfg.hydra.sweeper.params.items()]
    parsed = parser.parse_overrides([*params, "experiment=benchmark", *overrides])
    assert cfg.hydra.mode.name == "MULTIRUN"
    return BasicSweeper.split_arguments(parsed, None)[0], str(cfg.hydra.sweep.dir)


def rows_of(jobs) -> list[str]:
    return list(dict.fromkeys(job[0].removeprefix("+benchmark_row=") for job in jobs))


def algo_and_env(name: str) -> tuple[str, str]:
    row = benchmark_rows.rows()[name]
    return row["algo"], row["env"]


def test_every_row_holds_rl_zoos_budget_and_a_final_evaluation_of_20_episodes():
    for name, row in row_files().items():
        variant, env = algo_and_env(name)
        overrides = [next(iter(entry.items())) for entry in row["defaults"]]
        assert ("override /algo", variant) in overrides, name
        assert row["env"]["id"] == env and name == f"{variant}-{env.replace('/', '_')}", name
        assert (("override /env", "atari") in overrides) == env.startswith("ALE/"), name
        zoo = rl_zoo.reference(variant, env)
        assert zoo is not None, f"{name}: no RL-Zoo row to compare with"
        budget = zoo.n_timesteps // FRAME_SKIP if zoo.source == rl_zoo.CLEANRL else zoo.n_timesteps
        assert row["total_steps"] == budget, name
        distributed = ("override /parallel", "distributed") in overrides
        assert distributed == (variant in DISTRIBUTED), name
        assert ("override /parallel", "local") in overrides or distributed, name
        assert row["workers"] == (4 if distributed else 1), name


def test_every_rl_zoo_row_of_the_table_has_its_rlpar_rows():
    """PPO, A2C, DQN, SAC and TD3 on RL-Zoo's own rows; IMPALA and APPO on PPO's classic, Box2D and
    (CleanRL's) Atari rows; Ape-X on DQN's; the Ape-X-style SAC on SAC's."""
    names = set(row_files())
    wanted = set()
    for zoo in rl_zoo.REFERENCE_ROWS:
        ours = next((ours for ours, theirs in rl_zoo.ZOO_ENV.items() if theirs == zoo.env), zoo.env)
        env = ours.replace("/", "_")
        wanted.add(f"{zoo.algo}-{env}")
        mujoco = ours in ENVS["mujoco"]
        if zoo.algo == "ppo" and not mujoco:
            wanted |= {f"impala-{env}", f"appo-{env}"}
        if zoo.algo == "dqn":
            wanted.add(f"apex-{env}")
        if zoo.algo == "sac":
            wanted.add(f"apex_sac-{env}")
    assert names == wanted
    assert {row.algo for row in rl_zoo.ROWS} == set(RL_ZOO_ALGOS)


def test_the_sub_tables_split_the_rows_and_all_is_them_in_order():
    tables = {}
    for table in (*TABLES, "all"):
        jobs, sweep_dir = sweep_jobs(*([] if table == "all" else [f"benchmark={table}"]))
        rows = rows_of(jobs)
        assert len(jobs) == 3 * len(rows) and len(set(rows)) == len(rows)
        assert [job[1] for job in jobs[:3]] == ["seed=0", "seed=1", "seed=2"]
        assert sweep_dir.startswith(f"outputs/multirun/benchmark_{'' if table == 'all' else table + '_'}")
        tables[table] = rows
    for table in TABLES:
        assert {algo_and_env(name)[1] for name in tables[table]} == ENVS[table]
    assert tables["all"] == tables["classic"] + tables["box2d"] + tables["mujoco"] + tables["atari"]
    assert sorted(tables["all"]) == sorted(row_files())


def test_a_row_or_a_seed_given_on_the_command_line_replaces_the_tables():
    jobs, _ = sweep_jobs("benchmark=mujoco", "seed=0")
    assert len(jobs) == len(rows_of(jobs)) == 23
    jobs, _ = sweep_jobs("+benchmark_row=ppo-CartPole-v1,dqn-CartPole-v1")
    assert [job[:2] for job in jobs] == [[f"+benchmark_row={row}", f"seed={seed}"] for row in
                                         ("ppo-CartPole-v1", "dqn-CartPole-v1") for seed in (0, 1, 2)]


@pytest.mark.parametrize("row, algo, env, mode, workers, model", [
    ("ppo-CartPole-v1", "ppo", "CartPole-v1", "local", 1, "PolicySpec"),
    ("dqn-LunarLander-v3", "dqn", "LunarLander-v3", "local", 1, "QNetworkSpec"),
    ("apex-MountainCar-v0", "apex", "MountainCar-v0", "distributed", 4, "QNetworkSpec"),
    ("impala-Pendulum-v1", "impala", "Pendulum-v1", "distributed", 4, "PolicySpec"),
])
def test_a_row_composes_to_its_algorithm_environment_mode_and_budget(row, algo, env, mode, workers, model):
    cfg = compose_config(["experiment=benchmark", f"+benchmark_row={row}"])
    assert (cfg.algo.name, cfg.env.id, cfg.parallel.name, cfg.workers) == (algo, env, mode, workers)
    assert cfg.model._target_.rsplit(".", 1)[1] == model
    assert cfg.total_steps == benchmark_rows.rows()[row]["total_steps"]  # over the preset's
    assert (cfg.eval_episodes, cfg.experiment_name, cfg.progress) == (20, "benchmark", False)


@pytest.mark.parametrize("row, algo, env, mode, workers", [
    ("ppo-ALE_Pong-v5", "ppo", "ALE/Pong-v5", "local", 1),
    ("impala-ALE_Breakout-v5", "impala", "ALE/Breakout-v5", "distributed", 4),
    ("appo-ALE_BeamRider-v5", "appo", "ALE/BeamRider-v5", "distributed", 4),
])
def test_an_atari_row_composes_with_the_atari_env_group_and_a_quarter_of_cleanrls_budget(row, algo, env, mode,
                                                                                          workers):
    """Named with `_` for the id's `/` (Hydra reads `/` in an option as a folder); env=atari's
    preprocessing and its action protocol (no sticky actions) come with the row, which the default env group lacks."""
    cfg = compose_config(["experiment=benchmark", f"+benchmark_row={row}"])
    assert (cfg.algo.name, cfg.env.id, cfg.parallel.name, cfg.workers, cfg.total_steps) == (
        algo, env, mode, workers, 2_500_000)
    assert (cfg.env.atari.frame_skip, cfg.env.atari.frame_stack, cfg.env.kwargs.repeat_action_probability) == (
        4, 4, 0.0)
    assert "atari" not in compose_config([f"algo={algo}"]).env  # the row's env group, not the default's
    assert benchmark_rows.row_config(benchmark_rows.rows()[row])["defaults"][-1] == {"override /env": "atari"}


def test_a_row_name_with_the_ids_slash_is_refused_naming_the_row():
    from rlpar.config.overrides import override_problems

    [problem] = override_problems(["-m", "experiment=benchmark", "+benchmark_row=impala-ALE/Pong-v5"])
    assert problem.startswith("benchmark_row: 'impala-ALE/Pong-v5' is not an option of this config group; "
                              "did you mean impala-ALE_Pong-v5?"), problem
    assert benchmark_rows.env_group("ALE/Pong-v5") == "atari"
    assert benchmark_rows.env_group("CartPole-v1") is None and benchmark_rows.env_group("MiniGrid/X-v0") is None


@needs_sac
@pytest.mark.parametrize("row, target_module", [("sac-Hopper-v5", "sac"), ("td3-Pendulum-v1", "td3"),
                                                ("apex_sac-Pendulum-v1", "apex_sac")])
def test_the_sac_and_td3_rows_compose(row, target_module):
    cfg = compose_config(["experiment=benchmark", f"+benchmark_row={row}"])
    variant, env = algo_and_env(row)
    assert (cfg.algo.name, cfg.env.id) == (variant, env)
    assert cfg.parallel.name == ("distributed" if variant == "apex_sac" else "local")
    assert cfg.algo._target_.startswith(f"rlpar.algos.{target_module}.")


@pytest.mark.slow
def test_every_row_composes_and_one_row_per_environment_validates(tmp_path):
    """Every row composes (SAC's and TD3's once their configs exist); validation builds and steps one
    environment of each task, MuJoCo's and Box2D's included."""
    from rlpar.config.validate import validate_config

    validated = set()
    for name in row_files():
        variant, env = algo_and_env(name)
        if variant in ("sac", "td3", "apex_sac") and not SAC_WRITTEN:
            continue
        cfg = compose_config(["experiment=benchmark", f"+benchmark_row={name}"], run_dir=tmp_path / name)
        assert (cfg.env.id, cfg.eval_episodes) == (env, 20)
        if variant == "ppo" and env not in validated:
            validate_config(cfg)
            validated.add(env)
    assert validated == set().union(*ENVS.values())


def test_rows_are_found_by_the_name_hydra_is_given_and_conf_holds_no_file_per_row():
    from hydra.core.config_store import ConfigStore

    stored = {name.removesuffix(".yaml") for name in ConfigStore.instance().list(benchmark_rows.GROUP)}
    assert set(rows_of(sweep_jobs()[0])) == set(benchmark_rows.rows()) <= stored
    assert len(list((CONF_DIR / "benchmark_row").glob("*"))) <= 1


@pytest.mark.parametrize("row, keys", [
    ("apex-CartPole-v1", {"algo.replay_ratio": 1.0, "total_steps": 50000}),
    ("appo-CartPole-v1", {"algo.lr": 2.0e-3, "algo.anneal_lr": True}),
    ("impala-CartPole-v1", {"algo.lr": 5.0e-3}),
])
def test_a_rows_own_overrides_win_over_its_preset_and_cfg_job_prints_them(row, keys):
    """The table's overrides column (`algo.lr=2.0e-3 algo.anneal_lr=true`): read as YAML values, as
    Hydra reads the command line, and composed after the preset (CartPole's sets other values)."""
    from omegaconf import OmegaConf

    cfg = compose_config(["experiment=benchmark", f"+benchmark_row={row}"])
    preset = compose_config([f"algo={row.split('-')[0]}", "parallel=distributed"])
    for key, value in keys.items():
        assert OmegaConf.select(cfg, key) == value and OmegaConf.select(preset, key) != value, key
    import subprocess
    import sys
    printed = subprocess.run([sys.executable, "main.py", "experiment=benchmark", f"+benchmark_row={row}", "--cfg", "job"],
                             cwd=CONF_DIR.parent, capture_output=True, text=True, timeout=120)
    assert printed.returncode == 0, printed.stderr[-2000:]
    job = OmegaConf.create(printed.stdout)
    assert all(OmegaConf.select(job, key) == value for key, value in keys.items())


def test_a_sub_table_the_table_does_not_have_and_a_row_it_does_not_have_are_refused_naming_them():
    from rlpar.config.overrides import override_problems

    with pytest.raises(ValueError, match="no benchmark table 'pybullet' in rows.csv"):
        benchmark_rows.row_names("pybullet")
    [problem] = override_problems(["-m", "experiment=benchmark", "+benchmark_row=ppo-CartPol-v1,dqn-CartPole-v1"])
    assert problem.startswith("benchmark_row: 'ppo-CartPol-v1' is not an option of this config group; "
                              "did you mean ppo-CartPole-v1?")


def test_a_sub_table_without_the_experiment_is_refused_in_one_line_naming_it():
    from rlpar.config.overrides import override_problems

    assert override_problems(["benchmark=classic"]) == [
        "benchmark: chosen with experiment=benchmark (e.g. python main.py -m experiment=benchmark benchmark=classic)"]
    assert override_problems(["-m", "experiment=benchmark", "benchmark=classic"]) == []
    assert override_problems(["env=pendulum", "algo=dqn", "+table_row=local_1env"]) == []  # top-level groups, and `+`
