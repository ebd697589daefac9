"""What a resume may change about where a run runs (a new cluster once the old one's head is
lost), and the group choices it may repeat (deploy/slurm passes them on every run)."""

import pytest
from omegaconf import OmegaConf

from rlpar.config.validate import ConfigError
from rlpar.runtime.resume import config_for_resume
from rlpar.runtime.run_dir import write_config

CLUSTER_RUN = ("parallel=distributed", "hardware=cluster", "ray.address=127.0.0.1:6100", "workers=4")


@pytest.fixture
def cluster_run(make_cfg, tmp_path):
    """A run directory whose config.yaml is a cluster run's, as run() writes it (resolved)."""
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    write_config(run_dir, OmegaConf.to_container(make_cfg(*CLUSTER_RUN, run_dir=run_dir), resolve=True))
    return run_dir


def resumed(make_cfg, run_dir, *overrides):
    cfg = make_cfg(f"resume={run_dir}", *overrides, run_dir=run_dir)
    return config_for_resume(cfg, ["resume", *(o.split("=", 1)[0] for o in overrides)])


def test_a_resume_may_move_a_run_to_a_new_cluster(make_cfg, cluster_run):
    moved = resumed(make_cfg, cluster_run, "ray.address=127.0.0.1:6200")
    assert moved.ray.address == moved.parallel.ray_address == "127.0.0.1:6200"  # the sampler's copy follows
    assert moved.parallel.cpus_per_worker == 0.25 and moved.workers == 4


def test_a_resume_may_repeat_the_runs_own_group_choices_as_deploy_slurm_does(make_cfg, cluster_run):
    again = resumed(make_cfg, cluster_run, *CLUSTER_RUN[:2], "ray.address=127.0.0.1:6300", "total_steps=5000")
    assert again.parallel.ray_address == "127.0.0.1:6300" and again.total_steps == 5000
    assert again.parallel.name == "distributed" and again.hardware.device == "cpu"


@pytest.mark.parametrize("override, refusal", [
    ("parallel=local", "parallel: cannot be changed when resuming (parallel.name would be 'local', the run's is 'distributed')"),
    ("hardware=gpu", "hardware: cannot be changed when resuming (hardware.device would be 'cuda', the run's is 'cpu')"),
    ("algo.lr=0.1", "algo.lr: cannot be changed when resuming"),
])
def test_a_resume_may_not_change_what_the_run_learns(make_cfg, cluster_run, override, refusal):
    with pytest.raises(ConfigError) as refused:
        resumed(make_cfg, cluster_run, override)
    assert len(refused.value.problems) == 1 and refused.value.problems[0].startswith(refusal), refused.value.problems


def test_the_samplers_copies_of_the_ray_values_are_the_ones_a_resume_updates(make_cfg):
    from rlpar.config.changes import PLACEMENT_COPIES

    composed = OmegaConf.to_container(make_cfg("parallel=distributed").parallel, resolve=False)
    copies = {f"parallel.{key}": value[2:-1] for key, value in composed.items()
              if isinstance(value, str) and value.startswith("${ray.")}
    assert copies == PLACEMENT_COPIES
