"""A multi-node Ray cluster on one machine, all nodes on 127.0.0.1 (for trying and testing).

    python -m rlpar.cluster.local_cluster --nodes 2 --cpus-per-node 1

prints `address=127.0.0.1:PORT` once every node is up, then keeps the cluster alive until it is
interrupted (Ctrl-C / SIGTERM). Train on it with
`python main.py parallel=distributed hardware=cluster ray.address=127.0.0.1:PORT`.
`ray start` on one machine advertises the machine's external address; this does not.

The cluster requires Ray's auth token (RAY_AUTH_MODE=token): a client without it is refused.
The token is RAY_AUTH_TOKEN, else the file RAY_AUTH_TOKEN_PATH names, else ~/.ray/auth_token
(made, readable by this user only, if missing); a line `auth=...` says which. rlpar, run by the
same user, sends it by itself; another Ray client sets RAY_AUTH_MODE=token and, elsewhere or as
another user, RAY_AUTH_TOKEN to the token's text. `--auth disabled` starts it without
authentication, as clusters of older Rays are (any local user can then run code as this one):
to try rlpar against such a cluster.

To watch a run survive a lost node and grow onto a new one, type on its standard input:
`remove` (a worker node goes away, with its env runners) and `add` (a node joins);
each answers with a line `removed=NODE_ID` / `added=NODE_ID` (or `error=...`).
"""

from __future__ import annotations

import argparse
import os
import signal
import sys

from rlpar.cluster.auth import require_token_auth, set_auth_mode, token_source


def node_args(cpus_per_node: float, object_store_mb: int) -> dict:
    return dict(num_cpus=cpus_per_node, object_store_memory=object_store_mb * 1024 * 1024)


def start_cluster(nodes: int, cpus_per_node: float, object_store_mb: int = 100, auth: str = "token"):
    os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"  # every node on 127.0.0.1
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")  # no usage reports leave the machine
    # Cluster starts its nodes with the environment's mode, which is no authentication unless set.
    if auth == "token":
        require_token_auth(create_token=True)
    else:
        set_auth_mode("disabled")
    from ray.cluster_utils import Cluster

    args = node_args(cpus_per_node, object_store_mb)
    cluster = Cluster(initialize_head=True, head_node_args={**args, "include_dashboard": False})
    for _ in range(nodes - 1):
        cluster.add_node(**args)
    cluster.wait_for_nodes()
    return cluster


def serve_commands(cluster, new_node_args: dict, lines, watch=None) -> None:
    """Add and remove worker nodes on request, one command per line, until input ends. A
    command that fails is answered `error=...`; the cluster stays up."""
    for line in lines:
        command = line.strip()
        try:
            answer = _serve(cluster, command, new_node_args, watch)
        except Exception as err:  # one node's trouble must not take the cluster down
            answer = f"error={type(err).__name__}: {str(err).strip().splitlines()[0] if str(err).strip() else ''}"
        if answer:
            print(answer, flush=True)


def _serve(cluster, command: str, new_node_args: dict, watch) -> str | None:
    if command == "add":
        # add_node waits for this node to register. Not Cluster.wait_for_nodes: it counts the nodes
        # added less those removed, so a node whose raylet died meanwhile made it time out.
        node = cluster.add_node(**new_node_args)
        if watch is not None:
            watch.note()
        return f"added={node.node_id}"
    if command == "remove":
        workers = list(cluster.worker_nodes)
        if not workers:
            return "error=only the head node is left (the driver's node cannot be removed)"
        node = workers[0]
        cluster.remove_node(node)
        return f"removed={node.node_id}"
    return f"error=unknown command {command!r} (add | remove)" if command else None


def _interrupt(signum, frame):
    raise KeyboardInterrupt


class RayletWatch:
    """The raylets this cluster started, noted while they live: a worker process that was still
    starting when its raylet stopped is left behind by Ray, adopted by init (seen after a test
    session: one `ray::EnvRunner`), and is found afterwards by the raylet it was started for."""

    def __init__(self):
        self.raylets: set[str] = set()

    def note(self) -> None:
        import psutil

        for child in psutil.Process().children(recursive=True):
            try:
                if child.name().startswith("raylet"):
                    self.raylets.add(str(child.pid))
            except psutil.Error:
                pass

    def kill_leftovers(self) -> None:
        import psutil

        for process in psutil.process_iter():
            try:
                if process.environ().get("RAY_RAYLET_PID") in self.raylets:
                    process.kill()
            except psutil.Error:  # gone, or not ours to read
                pass


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=2)
    parser.add_argument("--cpus-per-node", type=float, default=1)
    parser.add_argument("--object-store-mb", type=int, default=100)
    parser.add_argument(
        "--auth",
        choices=("token", "disabled"),
        default="token",
        help="token (default): clients need Ray's auth token; disabled: none, as older Rays",
    )
    args = parser.parse_args()
    cluster = start_cluster(args.nodes, args.cpus_per_node, args.object_store_mb, args.auth)
    watch = RayletWatch()
    watch.note()
    signal.signal(signal.SIGTERM, _interrupt)
    if args.auth == "token":
        print(
            f"auth=token from {token_source()} (clients: RAY_AUTH_MODE=token, and this token unless "
            f"they read the same)",
            flush=True,
        )
    else:
        print("auth=disabled (any client that reaches the address can run code as this user)", flush=True)
    print(f"address={cluster.address}", flush=True)
    try:
        serve_commands(cluster, node_args(args.cpus_per_node, args.object_store_mb), sys.stdin, watch)
        while True:  # input closed: keep the cluster up until interrupted
            signal.pause()
    except KeyboardInterrupt:
        pass
    finally:
        cluster.shutdown()
        watch.kill_leftovers()


if __name__ == "__main__":
    main()
