"""Starting or joining Ray, on loopback unless the user names a cluster.

By default rlpar starts a private Ray instance bound to 127.0.0.1 with the dashboard off and
shuts it down at the end. `hardware=cluster ray.address=HOST:PORT` (or `auto`) joins a cluster
started with `ray start`; rlpar then ships its own package to the workers (`py_modules`).
"""

from __future__ import annotations

import os
from pathlib import Path

import rlpar
from rlpar.runtime.interrupts import HeldInterrupts

PACKAGE_DIR = Path(rlpar.__file__).resolve().parent
REPO_ROOT = PACKAGE_DIR.parent


def is_loopback(address: str) -> bool:
    host = address.split("://")[-1].rsplit(":", 1)[0]
    return host in ("127.0.0.1", "localhost", "::1") or host.startswith("127.")


def auto_address() -> tuple[str, str] | None:
    """The cluster Ray's `address="auto"` joins, and where that address came from: RAY_ADDRESS,
    else the file `ray start` writes (Ray 2.x: $RAY_TMPDIR, $TMPDIR or /tmp, then
    ray/ray_current_cluster). None when neither names one. (Ray's last resort, any GCS process
    `ps` shows, is left out: that may be another program's private instance.)"""
    if os.environ.get("RAY_ADDRESS"):
        return os.environ["RAY_ADDRESS"], "RAY_ADDRESS"
    address_file = current_cluster_file()
    if address_file.is_file():
        address = address_file.read_text().strip()
        if address:
            return address, str(address_file)
    return None


def current_cluster_file() -> Path:
    temp_dir = os.environ.get("RAY_TMPDIR") or os.environ.get("TMPDIR") or "/tmp"
    return Path(temp_dir) / "ray" / "ray_current_cluster"


def _prepare_environment(on_loopback: bool) -> None:
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")  # no usage reports leave the machine
    if on_loopback:
        # Otherwise Ray advertises the machine's external address even for a local instance.
        os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")


def _start_private_instance(num_cpus: float | None, object_store_mb: int, namespace: str) -> None:
    _prepare_environment(on_loopback=True)
    # Idle workers Ray would prestart for the driver compete with start-up on small machines
    # (ray.init 2.0 s instead of 2.8-3.7 s here); env runners start their own workers anyway.
    os.environ.setdefault("RAY_prestart_worker_first_driver", "0")
    # Workers of a local instance inherit the driver's environment: cheaper than a runtime_env.
    paths = [str(REPO_ROOT), *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]
    os.environ["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(paths))
    import ray

    _ray_init(
        ray,
        # "local": always a new instance. With no address, ray.init joins RAY_ADDRESS or the
        # cluster last started on this machine (ray/ray_current_cluster) and, given num_cpus,
        # fails ("When connecting to an existing cluster, num_cpus ... must not be provided").
        address="local",
        num_cpus=num_cpus or os.cpu_count(),
        include_dashboard=False,
        object_store_memory=object_store_mb * 1024 * 1024,
        _node_ip_address="127.0.0.1",
        namespace=namespace,
        log_to_driver=False,
        configure_logging=False,
    )


def _ray_init(ray, **kwargs) -> None:
    """ray.init, with Ctrl-C and SIGTERM held until it returns, then handled as before it.

    - Interrupted inside ray.init, the processes Ray has started so far are known to nobody:
      raylet and GCS die with the driver, but the raylet's agents (ray::DashboardAgent,
      ray::RuntimeEnvAgent) were left running for good. Held, the interrupt comes once Ray is
      up: it is shut down, then KeyboardInterrupt raised.
    - ray.init replaces the SIGTERM handler (main.py's, which turns SIGTERM into Ctrl-C) with
      its own, which exits at once: no final checkpoint. Handlers that raise KeyboardInterrupt
      are put back; a default SIGTERM is left to Ray's handler, which cleans up."""
    with HeldInterrupts("\nrlpar: stopping once Ray has started (a few seconds)") as interrupts:
        ray.init(**kwargs)
    if interrupts.requested:
        ray.shutdown()
        raise KeyboardInterrupt


_state = {"private_instance_pending": False}


def start_private_instance_early(*, num_cpus: float | None, object_store_mb: int, namespace: str = "rlpar") -> None:
    """Start the private instance now (main thread); the next RayConnection adopts it and shuts
    it down at the end. main.py does this while another thread imports torch: Ray takes ~4 s to
    boot here, about as long as the rest of start-up. (ray.init itself must stay on the main
    thread: started from another one, its GCS client never connects.)"""
    _start_private_instance(num_cpus, object_store_mb, namespace)
    _state["private_instance_pending"] = True


class RayConnection:
    """Context for one run's use of Ray: remembers whether rlpar started it, to stop only that."""

    def __init__(self, *, address: str | None, num_cpus: float | None, object_store_mb: int, namespace: str = "rlpar"):
        on_loopback = not address or is_loopback(address)
        _prepare_environment(on_loopback)
        import ray

        self.ray = ray
        self.started_here = False
        if _state["private_instance_pending"] and not address and ray.is_initialized():
            _state["private_instance_pending"] = False
            self.started_here = True
            return
        if ray.is_initialized():
            return
        if address:
            loopback = {"_node_ip_address": "127.0.0.1"} if on_loopback else {}
            _ray_init(
                ray,
                address=address,
                runtime_env={"py_modules": [str(PACKAGE_DIR)]},
                namespace=namespace,
                log_to_driver=False,
                configure_logging=False,
                **loopback,
            )
        else:
            _start_private_instance(num_cpus, object_store_mb, namespace)
        self.started_here = True

    def shutdown(self) -> None:
        if self.started_here and self.ray.is_initialized():
            self.ray.shutdown()
        self.started_here = False
