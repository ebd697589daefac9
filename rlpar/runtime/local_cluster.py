"""A multi-node Ray cluster on one machine, all nodes on 127.0.0.1 (for trying and testing).

    python -m rlpar.runtime.local_cluster --nodes 2 --cpus-per-node 1

prints `address=127.0.0.1:PORT` once every node is up, then keeps the cluster alive until it is
interrupted (Ctrl-C / SIGTERM). Train on it with
`python main.py parallel=distributed hardware=cluster ray.address=127.0.0.1:PORT`.
`ray start` on one machine advertises the machine's external address; this does not.
"""

from __future__ import annotations

import argparse
import os
import signal
import threading


def start_cluster(nodes: int, cpus_per_node: float, object_store_mb: int = 100):
    os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"  # every node on 127.0.0.1
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")  # no usage reports leave the machine
    from ray.cluster_utils import Cluster

    node_args = dict(num_cpus=cpus_per_node, object_store_memory=object_store_mb * 1024 * 1024)
    cluster = Cluster(initialize_head=True, head_node_args={**node_args, "include_dashboard": False})
    for _ in range(nodes - 1):
        cluster.add_node(**node_args)
    cluster.wait_for_nodes()
    return cluster


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=2)
    parser.add_argument("--cpus-per-node", type=float, default=1)
    parser.add_argument("--object-store-mb", type=int, default=100)
    args = parser.parse_args()
    cluster = start_cluster(args.nodes, args.cpus_per_node, args.object_store_mb)
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    print(f"address={cluster.address}", flush=True)
    try:
        stop.wait()
    finally:
        cluster.shutdown()


if __name__ == "__main__":
    main()
