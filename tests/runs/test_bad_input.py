"""Bad input of every kind is refused before anything starts: exit status non-zero, no
traceback, a line on stderr naming the bad key, and nothing made (no run directory, no Ray
instance).

The command lines run as subprocesses, a few at a time, in one module fixture: mostly Python
start-up and imports, which overlap well even on 2 cores.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from rlpar.config.validate import ConfigError, validate_config

ROOT = Path(__file__).resolve().parents[2]
REFUSAL = "rlpar: invalid config:"
AT_ONCE = 4
DEAD_ADDRESS = "127.0.0.1:1"  # nothing listens on port 1 without root
DISTRIBUTED_ON_CLUSTER = ["parallel=distributed", "hardware=cluster"]


@dataclass
class Case:
    args: list[str]
    key: str  # named, together with `detail`, on one line of stderr
    detail: str = ""
    by_hydra: bool = False  # refused by Hydra (exit 1) before rlpar sees the config (exit 2)
    resume: str | None = None  # which prepared directory to pass as resume=
    env: dict = field(default_factory=dict)


CASES = {
    "unknown_env_id": Case(["env.id=NoSuchEnv-v0"], "env.id", "NoSuchEnv-v0"),
    "unknown_group_option": Case(["parallel=distibuted"], "parallel", "did you mean distributed?"),
    "unknown_key": Case(["algo.learning_rate=1e-3"], "algo.learning_rate", "did you mean algo.lr?"),
    "misspelt_added_algo_key": Case(["+algo.epoch=5"], "algo.epoch", "did you mean algo.epochs?"),
    "misspelt_added_sampler_key": Case(
        ["parallel=multiprocess", "+parallel.sample_timeout=5"], "parallel.sample_timeout", "did you mean parallel.sample_timeout_s?"
    ),
    "sampler_key_local_sampling_lacks": Case(["+parallel.sample_timeout=5"], "parallel.sample_timeout", "unknown key"),
    "added_top_level_key": Case(["+foo=1"], "foo", "unknown key"),
    "env_constructor_raises": Case(["+env.kwargs.bogus=1"], "env", "unexpected keyword argument 'bogus'"),
    "env_observations_mismatch_their_space": Case(
        ["env.id=null", "env.entry_point=tests.faulty_envs:WrongShapeCartPole"], "env", "shape (3,)"
    ),
    "observations_too_large_for_memory": Case(
        ["env.id=null", "env.entry_point=tests.faulty_envs:HugeObservationEnv"], "memory", "GiB is available"
    ),
    "run_dir_is_a_file": Case(["run_dir=README.md"], "run_dir", "is a file"),
    "run_dir_cannot_be_created": Case(["run_dir=/proc/rlpar-run"], "run_dir", "cannot be written"),
    "override_without_value": Case(["algo.lr"], "algo.lr", "Error parsing override", by_hydra=True),
    "malformed_override": Case(["algo.lr=[1,2"], "algo.lr", "not a valid override"),
    "group_choice_not_a_name": Case(["algo=3"], "algo", "not an option"),
    "workers_not_an_integer": Case(["workers=two"], "workers", "'two'"),
    "epochs_not_an_integer": Case(["algo.epochs=1.5"], "algo.epochs", "1.5"),
    "unresolvable_interpolation": Case(["algo.lr=${nope}"], "algo.lr", "nope"),
    "zero_workers": Case(["workers=0"], "workers", "out of range"),
    "zero_lr": Case(["algo.lr=0"], "algo.lr", "out of range"),
    "negative_lr": Case(["algo.lr=-0.001"], "algo.lr", "out of range"),
    "gamma_above_one": Case(["algo.gamma=1.5"], "algo.gamma", "1.5"),
    "clip_not_in_open_unit_interval": Case(["algo.clip=1.0"], "algo.clip", "out of range"),
    "minibatch_larger_than_batch": Case(["algo.minibatch_size=100000"], "algo.minibatch_size", "larger than the batch"),
    "non_blocking_local_sampling": Case(
        ["parallel=local", "parallel.sync_mode=non_blocking"], "parallel.sync_mode", "non_blocking"
    ),
    "more_live_workers_required_than_workers": Case(
        ["parallel=multiprocess", "workers=2", "parallel.min_live_workers=3"], "parallel.min_live_workers", "more than workers"
    ),
    "gpu_without_gpu": Case(["hardware=gpu"], "hardware.device", "no CUDA GPU"),
    "resume_missing_directory": Case([], "resume", "does not exist", resume="missing"),
    "resume_not_a_run_directory": Case([], "resume", "not an rlpar run directory", resume="not_a_run"),
    "resume_without_checkpoint": Case([], "resume", "no checkpoint", resume="no_checkpoint"),
    "resume_damaged_checkpoint": Case([], "resume", "all damaged/unreadable", resume="damaged"),
    "resume_with_a_changed_setting": Case(["workers=4"], "workers", "cannot be changed when resuming", resume="good"),
    "ray_address_unreachable": Case(
        [*DISTRIBUTED_ON_CLUSTER, f"ray.address={DEAD_ADDRESS}"], "ray.address", "connection refused"
    ),
    "ray_address_auto_without_cluster": Case(DISTRIBUTED_ON_CLUSTER, "ray.address", "no running Ray cluster"),
    "ray_address_auto_from_dead_variable": Case(
        DISTRIBUTED_ON_CLUSTER, "ray.address", "RAY_ADDRESS", env={"RAY_ADDRESS": DEAD_ADDRESS}
    ),
    # Every input bounded (issue 24): sizes against the machine, seeds, counts and id lengths.
    "seed_beyond_what_seeds_take": Case([f"seed={2**70}"], "seed", "out of range (must be <= 2147483647)"),
    "seed_as_an_expression": Case(["seed=2**70"], "seed", "expected an integer, got '2**70'"),
    "negative_eval_episodes": Case(["eval_episodes=-1"], "eval_episodes", "out of range"),
    "ten_kilobyte_env_id": Case([f"env.id={'A' * 10240}"], "env.id", "10240 characters long"),
    "forked_workers_beyond_memory": Case(["parallel=multiprocess", "workers=10000"], "workers",
                                         "cannot run on this machine: memory"),
    "ray_workers_beyond_memory": Case(["parallel=distributed", "workers=10000"], "workers",
                                      "cannot run on this machine: memory"),
    "a_million_environments_per_worker": Case(["envs_per_worker=1000000"], "envs_per_worker", "out of range"),
    "more_environments_than_steps": Case(["envs_per_worker=200", "total_steps=100"], "envs_per_worker",
                                         "more than total_steps (100)"),
    "array_reward_from_the_first_step": Case(
        ["env.id=null", "env.entry_point=tests.faulty_envs:BadOutputAfterCartPole", "+env.kwargs.after=1",
         "+env.kwargs.what=array_reward"], "env", "a reward of type ndarray"),
    "string_reward_from_the_first_step": Case(
        ["env.id=null", "env.entry_point=tests.faulty_envs:BadOutputAfterCartPole", "+env.kwargs.after=1",
         "+env.kwargs.what=string_reward"], "env", "a reward of type str ('1.0')"),
    "negative_env_restart_limit": Case(["env.max_restarts=-1"], "env.max_restarts", "out of range"),
    # NaN fails every comparison: no range check caught it (issue 39)
    "time_limit_of_nan": Case(["time_limit_s=nan"], "time_limit_s", "nan is not a number"),
    "learner_group_timeout_of_nan": Case(["learner_group.timeout_s=nan"], "learner_group.timeout_s", "nan is not a number"),
    "infinite_learning_rate": Case(["algo.lr=inf"], "algo.lr", "inf is not finite"),
    "policy_name_with_a_dot": Case(["env=pettingzoo", "algo=mappo", "env.policies={x.y: [agent_*]}"], "env.policies",
                                   "policy name 'x.y' must be a name without dots"),
    "policy_matching_no_agent": Case(["env=pettingzoo", "algo=mappo", "env.policies={a: [agent_*], b: [adversary_*]}"],
                                     "env.policies", "b (adversary_*) matches no agent"),
    # agents created as it runs, no possible_agents: one line, not PettingZoo's AttributeError (issue 43)
    "agents_generated_as_it_runs": Case(
        ["env=pettingzoo", "env.id=pettingzoo.test.example_envs.generated_agents_parallel_v0", "algo=ippo"], "env",
        "declares no possible_agents"),
    "resume_with_a_key_its_command_lacks": Case(["env.policies=agent"], "env.policies", "cannot be changed when resuming",
                                                resume="good"),
    "hydra_run_dir_cannot_be_made": Case(["hydra.run.dir=/proc/rlpar-run"], "hydra.run.dir", "cannot be written"),
    "run_dir_name_too_long": Case([f"run_dir={'a' * 300}"], "run_dir", "File name too long"),
}
SEVERAL = [
    "env.id=NoSuchEnv-v0",
    "workers=0",
    "algo.lr=-1",
    "algo.gamma=1.5",
    "algo.clip=1.0",
    "algo.epochs=two",
    *DISTRIBUTED_ON_CLUSTER,
    f"ray.address={DEAD_ADDRESS}",
]
SEVERAL_KEYS = ["env.id", "workers", "algo.lr", "algo.gamma", "algo.clip", "algo.epochs", "ray.address"]


def run_main(args: list[str], ray_tmpdir: Path, extra_env: dict | None = None):
    """main.py in a subprocess, away from any Ray cluster this machine may run (RAY_TMPDIR: where
    a Ray instance it started would keep its session)."""
    env = {k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS", "HYDRA_FULL_ERROR")}
    env.update(RAY_TMPDIR=str(ray_tmpdir), **(extra_env or {}))
    return subprocess.run(
        [sys.executable, "main.py", *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300
    )


def prepare_resume_dirs(run_dir: Path, tmp: Path) -> dict[str, Path]:
    """Resume targets made from a real run directory, each broken in one way (and it, intact)."""
    (tmp / "not_a_run").mkdir()
    no_checkpoint = shutil.copytree(run_dir, tmp / "no_checkpoint")
    shutil.rmtree(no_checkpoint / "checkpoints")
    damaged = shutil.copytree(run_dir, tmp / "damaged")
    checkpoints = list((damaged / "checkpoints").glob("checkpoint_*.pt"))
    assert checkpoints, "the real run wrote no checkpoint"
    for path in checkpoints:
        path.write_bytes(b"\x00garbage, not a checkpoint\xff")
    return {"missing": tmp / "nope", "not_a_run": tmp / "not_a_run", "no_checkpoint": no_checkpoint,
            "damaged": damaged, "good": run_dir}


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    """The CompletedProcess of every case and of SEVERAL, run AT_ONCE at a time."""
    tmp = tmp_path_factory.mktemp("bad_input")
    ray_tmpdir = tmp / "ray_tmp"  # holds no ray/ray_current_cluster: `auto` finds no cluster
    ray_tmpdir.mkdir()

    def submit(pool, name, args, extra_env=None):
        return pool.submit(run_main, [*args, f"hydra.run.dir={tmp / 'out' / name}"], ray_tmpdir, extra_env)

    with ThreadPoolExecutor(AT_ONCE) as pool:
        real_run = submit(pool, "real_run", ["total_steps=256", "progress=false"])
        futures = {n: submit(pool, n, c.args, c.env) for n, c in CASES.items() if c.resume is None}
        futures["several"] = submit(pool, "several", SEVERAL)
        proc = real_run.result()
        assert proc.returncode == 0, proc.stderr
        resume_dirs = prepare_resume_dirs(tmp / "out" / "real_run", tmp)
        for name, case in CASES.items():
            if case.resume is not None:
                futures[name] = submit(pool, name, [*case.args, f"resume={resume_dirs[case.resume]}"], case.env)
        return {"out": tmp / "out", "ray_tmpdir": ray_tmpdir, **{name: future.result() for name, future in futures.items()}}


@pytest.mark.slow
@pytest.mark.parametrize("name", CASES)
def test_bad_input_is_refused_clearly(results, name):
    case = CASES[name]
    if name == "gpu_without_gpu" and _cuda_available():
        pytest.skip("a CUDA GPU is visible: hardware=gpu is fine here")
    proc = results[name]
    output = proc.stdout + proc.stderr
    assert proc.returncode == (1 if case.by_hydra else 2), output
    assert "Traceback" not in output
    if case.by_hydra:
        assert [line for line in proc.stderr.splitlines() if case.key in line and case.detail in line], output
    else:
        assert proc.stderr.count(REFUSAL) == 1, output
        problems = [line for line in problem_lines(proc.stderr) if line.startswith(f"{case.key}:")]
        assert len(problems) == 1 and case.detail in problems[0], output
    if case.resume is None:  # a refused run leaves neither Hydra's output folder nor a run directory
        assert not (results["out"] / name).exists()


@pytest.mark.slow
def test_no_refusal_started_ray(results):
    """Refused before the slow part: not one case (ray.address, workers=10000 on Ray, ...) got as
    far as starting a Ray instance, which would have left its session under RAY_TMPDIR."""
    assert not list(results["ray_tmpdir"].glob("ray/session_*"))


def problem_lines(stderr: str) -> list[str]:
    """One problem: `rlpar: invalid config: PROBLEM`; several: one indented line each below it."""
    return [line.replace(REFUSAL, "", 1).strip() for line in stderr.splitlines() if line.strip() != REFUSAL]


@pytest.mark.slow
def test_several_problems_come_in_one_message(results):
    proc = results["several"]
    assert proc.returncode == 2
    assert "Traceback" not in proc.stdout + proc.stderr
    assert proc.stderr.count(REFUSAL) == 1
    problem_keys = [line.split(":")[0] for line in problem_lines(proc.stderr) if line]
    assert sorted(problem_keys) == sorted(SEVERAL_KEYS), proc.stderr


def _cuda_available() -> bool:
    import torch

    return torch.cuda.is_available()


# The ray.address check itself, in process: it mirrors how Ray's `auto` finds a cluster.


@pytest.fixture
def listening_address():
    """A gRPC server on loopback standing in for a cluster's GCS: it answers the one call rlpar
    makes before joining (GetClusterId) as a cluster without authentication does."""
    from concurrent import futures

    import grpc

    answer = grpc.unary_unary_rpc_method_handler(lambda request, context: b"", request_deserializer=bytes,
                                                 response_serializer=bytes)
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=1))
    server.add_generic_rpc_handlers([grpc.method_handlers_generic_handler("ray.rpc.NodeInfoGcsService",
                                                                           {"GetClusterId": answer})])
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        yield f"127.0.0.1:{port}"
    finally:
        server.stop(grace=None)


@pytest.fixture
def no_cluster_around(monkeypatch, tmp_path):
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    monkeypatch.setenv("RAY_TMPDIR", str(tmp_path / "ray_tmp"))
    return tmp_path / "ray_tmp" / "ray" / "ray_current_cluster"


def _ray_problems(make_cfg, *overrides) -> list[str]:
    try:
        validate_config(make_cfg(*overrides), check_env=False)
    except ConfigError as err:
        return [p for p in err.problems if p.startswith("ray.address")]
    return []


def test_reachable_address_passes(make_cfg, listening_address, no_cluster_around):
    assert _ray_problems(make_cfg, *DISTRIBUTED_ON_CLUSTER, f"ray.address={listening_address}") == []
    assert _ray_problems(make_cfg, *DISTRIBUTED_ON_CLUSTER, f"ray.address=ray://{listening_address}") == []


def test_auto_joins_the_address_in_ray_address(make_cfg, listening_address, no_cluster_around, monkeypatch):
    monkeypatch.setenv("RAY_ADDRESS", listening_address)
    assert _ray_problems(make_cfg, *DISTRIBUTED_ON_CLUSTER) == []


def test_auto_joins_the_cluster_ray_start_recorded(make_cfg, listening_address, no_cluster_around):
    no_cluster_around.parent.mkdir(parents=True)
    no_cluster_around.write_text(listening_address + "\n")
    assert _ray_problems(make_cfg, *DISTRIBUTED_ON_CLUSTER) == []


def test_auto_refuses_a_stale_cluster_file(make_cfg, no_cluster_around):
    no_cluster_around.parent.mkdir(parents=True)
    no_cluster_around.write_text(DEAD_ADDRESS)
    (problem,) = _ray_problems(make_cfg, *DISTRIBUTED_ON_CLUSTER)
    assert "nothing answers" in problem and str(no_cluster_around) in problem


@pytest.mark.slow
@pytest.mark.parametrize("parallel", ["local", "multiprocess"])
def test_a_cluster_with_a_sampler_that_uses_no_ray_is_refused(make_cfg, no_cluster_around, parallel):
    for overrides in (["hardware=cluster"], [f"ray.address={DEAD_ADDRESS}"]):
        (problem,) = _ray_problems(make_cfg, f"parallel={parallel}", *overrides)
        assert f"parallel={parallel}" in problem and "uses no Ray" in problem and "hardware=cluster" in problem


def test_address_that_is_not_host_and_port_is_refused(make_cfg, no_cluster_around):
    (problem,) = _ray_problems(make_cfg, *DISTRIBUTED_ON_CLUSTER, "ray.address=localhost")
    assert "is not HOST:PORT" in problem
