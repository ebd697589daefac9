"""Starting or joining Ray, on loopback unless the user names a cluster.

By default rlpar starts a private Ray instance bound to 127.0.0.1 with the dashboard off and
shuts it down at the end. `hardware=cluster ray.address=HOST:PORT` (or `auto`) joins a cluster
started with `ray start`; rlpar then ships its own package to the workers (`py_modules`).
"""

from __future__ import annotations

import os
from pathlib import Path

import rlpar

PACKAGE_DIR = Path(rlpar.__file__).resolve().parent
REPO_ROOT = PACKAGE_DIR.parent


def is_loopback(address: str) -> bool:
    host = address.split("://")[-1].rsplit(":", 1)[0]
    return host in ("127.0.0.1", "localhost", "::1") or host.startswith("127.")


class RayConnection:
    """Context for one run's use of Ray: remembers whether rlpar started it, to stop only that."""

    def __init__(self, *, address: str | None, num_cpus: float | None, object_store_mb: int, namespace: str = "rlpar"):
        on_loopback = not address or is_loopback(address)
        if on_loopback:
            # Otherwise Ray advertises the machine's external address even for a local instance.
            os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
        import ray

        self.ray = ray
        self.started_here = False
        if ray.is_initialized():
            return
        common = dict(namespace=namespace, log_to_driver=False, configure_logging=False)
        if address:
            loopback = {"_node_ip_address": "127.0.0.1"} if on_loopback else {}
            ray.init(address=address, runtime_env={"py_modules": [str(PACKAGE_DIR)]}, **loopback, **common)
        else:
            ray.init(
                num_cpus=num_cpus or os.cpu_count(),
                include_dashboard=False,
                object_store_memory=object_store_mb * 1024 * 1024,
                _node_ip_address="127.0.0.1",
                runtime_env={"env_vars": {"PYTHONPATH": str(REPO_ROOT)}},
                **common,
            )
        self.started_here = True

    def shutdown(self) -> None:
        if self.started_here and self.ray.is_initialized():
            self.ray.shutdown()
        self.started_here = False
