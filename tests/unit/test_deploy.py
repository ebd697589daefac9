"""The deployment files a lab copies (deploy/): what can be checked without their clusters."""

import re
import shlex
from pathlib import Path

import yaml

from rlpar.config.compose import compose_config

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"


def pinned(package: str) -> str:
    line = next(line for line in (ROOT / "requirements.txt").read_text().splitlines() if line.startswith(package))
    return line.split("==")[1].split()[0]


def ray_start_ports(command: str) -> dict[str, str]:
    return dict(re.findall(r"--((?:[a-z-]+-)?port)=(\d+)", command))


def slurm_default_ports() -> dict[str, str]:
    defaults = dict(re.findall(r'^: "\$\{RAY_([A-Z_]+):=(\d+)\}"', (DEPLOY / "slurm" / "ray_nodes.sh").read_text(), re.M))
    return {name.lower().replace("_", "-"): value for name, value in defaults.items()}


def test_the_ray_up_cluster_yaml_passes_rays_own_validation_and_pins_the_documented_ports():
    from ray.autoscaler._private.util import prepare_config, validate_config

    config = yaml.safe_load((DEPLOY / "ray-up" / "cluster.yaml").read_text())
    validate_config(config)
    validate_config(prepare_config(config))  # as `ray up` fills in its defaults
    head = " ".join(config["head_start_ray_commands"])
    worker = " ".join(config["worker_start_ray_commands"])
    assert "RAY_AUTH_MODE=token" in head and "RAY_AUTH_MODE=token" in worker
    slurm = slurm_default_ports()
    assert ray_start_ports(head) == slurm  # the GCS's port too
    assert ray_start_ports(worker) == {k: v for k, v in slurm.items() if k != "port"}
    assert any("rlpar-*.whl" in command for command in config["setup_commands"])


def test_the_kuberay_rayjob_runs_a_valid_rlpar_command_on_the_pinned_ray_with_a_token():
    job = yaml.safe_load((DEPLOY / "kuberay" / "rayjob.yaml").read_text())
    assert (job["apiVersion"], job["kind"]) == ("ray.io/v1", "RayJob")
    cluster = job["spec"]["rayClusterSpec"]
    assert cluster["rayVersion"] == pinned("ray[tune]") and cluster["authOptions"] == {"mode": "token"}
    command = shlex.split(job["spec"]["entrypoint"])
    assert command[:2] == ["rlpar", "train"]
    cfg = compose_config(command[2:])
    assert (cfg.algo.name, cfg.parallel.name, cfg.ray.address) == ("impala", "distributed", "auto")
    images = {c["image"] for group in [cluster["headGroupSpec"], *cluster["workerGroupSpecs"]]
              for c in group["template"]["spec"]["containers"]}
    assert len(images) == 1  # every node the same image


def test_the_dockerfile_builds_on_the_pinned_ray_and_python_and_copies_what_exists():
    text = (DEPLOY / "Dockerfile").read_text()
    assert f"FROM rayproject/ray:{pinned('ray[tune]')}-py311" in text
    for line in text.splitlines():
        if line.startswith("COPY "):
            for source in line.split()[1:-1]:
                assert (ROOT / source).exists(), source
