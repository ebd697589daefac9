"""What `rlpar serve` costs a client: latency (p50, p99) of single and batched POST /act requests
on one keep-alive connection, the same without keep-alive, throughput with several clients, and
the policy's own `act` in process beside them (what HTTP adds). The server runs as a user runs it
(`rlpar serve RUN_DIR`, its own process) on 127.0.0.1; the run is a PPO CartPole one trained here
unless --run-dir names one.

    .venv/bin/python benchmarks/serve_latency.py [--run-dir RUN] [--requests 2000]
"""

from __future__ import annotations

import argparse
import http.client
import json
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np
from common import ROOT, machine, markdown_table, run_main, wait_for_quiet

BATCHES = (8, 64)
CLIENTS = 4


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def post(connection: http.client.HTTPConnection, body: bytes) -> dict:
    connection.request("POST", "/act", body=body, headers={"Content-Type": "application/json"})
    response = connection.getresponse()
    answer = json.loads(response.read())
    assert response.status == 200, answer
    return answer


def timed(call, bodies: list[bytes]) -> np.ndarray:
    """Seconds of each call, in order."""
    times = np.empty(len(bodies))
    for i, body in enumerate(bodies):
        start = time.perf_counter()
        call(body)
        times[i] = time.perf_counter() - start
    return times


def row(name: str, times: np.ndarray, observations: int) -> list:
    p50, p99 = np.percentile(times, [50, 99]) * 1000
    return [name, f"{p50:.2f}", f"{p99:.2f}", f"{len(times) / times.sum():,.0f}", f"{observations / times.sum():,.0f}"]


def measure(port: int, observations: np.ndarray, requests: int) -> list[list]:
    rows = []
    connection = http.client.HTTPConnection("127.0.0.1", port)
    singles = [json.dumps({"observation": o.tolist()}).encode() for o in observations[:requests]]
    timed(lambda body: post(connection, body), singles[:200])  # warm-up
    rows.append(row("single observation, keep-alive", timed(lambda body: post(connection, body), singles), requests))
    for size in BATCHES:
        bodies = [
            json.dumps({"observations": observations[i : i + size].tolist()}).encode()
            for i in range(0, size * (requests // 4), size)
        ]
        rows.append(row(f"batch of {size}, keep-alive", timed(lambda body: post(connection, body), bodies), size * len(bodies)))
    connection.close()

    def fresh(body: bytes) -> None:
        one = http.client.HTTPConnection("127.0.0.1", port)
        post(one, body)
        one.close()

    rows.append(row("single observation, a connection each", timed(fresh, singles[: requests // 4]), requests // 4))
    per_client = requests // CLIENTS
    all_times: list[np.ndarray] = [np.empty(0)] * CLIENTS

    def client(k: int) -> None:
        mine = http.client.HTTPConnection("127.0.0.1", port)
        all_times[k] = timed(lambda body: post(mine, body), singles[k * per_client : (k + 1) * per_client])
        mine.close()

    threads = [threading.Thread(target=client, args=(k,)) for k in range(CLIENTS)]
    start = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    wall = time.perf_counter() - start
    joined = np.concatenate(all_times)
    p50, p99 = np.percentile(joined, [50, 99]) * 1000
    rows.append([f"single observation, {CLIENTS} clients at once", f"{p50:.2f}", f"{p99:.2f}",
                 f"{len(joined) / wall:,.0f}", f"{len(joined) / wall:,.0f}"])
    return rows


def in_process(run_dir: Path, observations: np.ndarray, requests: int) -> list[list]:
    """The policy's own `act`, and the server run in this process with Nagle's algorithm left on
    (what `disable_nagle_algorithm` saves: each answer would wait for the client's delayed ACK)."""
    from rlpar import load_policy
    from rlpar.serving.server import PolicyRequestHandler, PolicyServer, PolicyService

    policy = load_policy(run_dir)
    timed(lambda obs: policy.act(obs), list(observations[:200]))
    rows = [row("policy.act in process (no HTTP)", timed(lambda obs: policy.act(obs), list(observations[:requests])),
                requests)]

    class NagleHandler(PolicyRequestHandler):
        disable_nagle_algorithm = False

    server = PolicyServer(("127.0.0.1", 0), PolicyService({"": policy}), None)
    server.RequestHandlerClass = NagleHandler
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    connection = http.client.HTTPConnection("127.0.0.1", server.server_address[1])
    bodies = [json.dumps({"observation": o.tolist()}).encode() for o in observations[: requests // 10]]
    rows.append(row("single observation, keep-alive, Nagle's algorithm on", timed(lambda b: post(connection, b), bodies),
                    len(bodies)))
    connection.close()
    server.shutdown()
    server.server_close()
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--run-dir", type=Path, default=None, help="a CartPole run (default: train one here)")
    parser.add_argument("--requests", type=int, default=2000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="rlpar_serve_") as tmp:
        run_dir = args.run_dir
        if run_dir is None:
            run_dir = Path(tmp) / "run"
            done, _ = run_main(["total_steps=8192", "checkpoint.every=0"], run_dir)
            assert done.returncode == 0, done.stderr[-2000:]
        load = wait_for_quiet(1.5, 60)
        port = free_port()
        server = subprocess.Popen([sys.executable, "-m", "rlpar", "serve", str(run_dir), "--port", str(port)], cwd=ROOT,
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            line = server.stdout.readline()
            assert line.startswith("serving "), line + server.stderr.read()
            observations = np.random.default_rng(0).uniform(-0.1, 0.1, (64 * args.requests, 4)).astype(np.float32)
            rows = measure(port, observations, args.requests)
        finally:
            server.terminate()
            server.wait(30)
        rows += in_process(run_dir, observations, args.requests)
    print(f"# {machine()} (load at start {load:.2f}); {args.requests} requests per row, CartPole PPO (64x64 MLP)")
    print(markdown_table(["requests", "p50 ms", "p99 ms", "requests/s", "observations/s"], rows))


if __name__ == "__main__":
    main()
