"""A trained policy served by `rlpar serve`, driving an environment from another process that
knows nothing of rlpar or torch: the environment's observations go out as JSON, its actions come
back. A simulator written in any language talks to the server the same way.

    python examples/deploy/drive_env.py RUN_DIR [--env CartPole-v1] [--episodes 10] [--seed 500]

starts `rlpar serve RUN_DIR` (this Python's rlpar) on a free port of 127.0.0.1, plays the episodes through POST /act (a
recurrent policy's memory lives in the server: one session per episode, reset at its start), prints
each return, and stops the server. With the same seed, the returns are those of
`rlpar evaluate RUN_DIR --episodes 10 --seed 500`. To serve other machines, the server needs a token
that every request sends: `rlpar serve RUN_DIR --host 0.0.0.0 --token SECRET` and a header
`Authorization: Bearer SECRET`.
"""

from __future__ import annotations

import argparse
import http.client
import json
import signal
import socket
import subprocess
import sys

import gymnasium as gym
import numpy as np


class PolicyClient:
    """POST /act over one keep-alive connection (http.client: the standard library)."""

    def __init__(self, host: str, port: int, token: str | None = None):
        self.connection = http.client.HTTPConnection(host, port, timeout=30)
        self.headers = {"Content-Type": "application/json"}
        if token:
            self.headers["Authorization"] = f"Bearer {token}"

    def call(self, method: str, path: str, body: dict | None = None) -> dict:
        data = None if body is None else json.dumps(body).encode()
        self.connection.request(method, path, body=data, headers=self.headers)
        response = self.connection.getresponse()
        answer = json.loads(response.read())
        if response.status != 200:
            raise RuntimeError(f"{method} {path}: {response.status} {answer.get('error')}")
        return answer

    def act(self, observation, session: str, reset: bool):
        """The action for one observation, in the environment's own terms (an int, or a list of floats)."""
        return self.call("POST", "/act", {"observation": to_json(observation), "session": session, "reset": reset})[
            "action"
        ]


def to_json(observation):
    """An observation as JSON holds it: lists of numbers, an object for a Dict space's."""
    if isinstance(observation, dict):
        return {key: to_json(value) for key, value in observation.items()}
    if isinstance(observation, tuple):
        return [to_json(value) for value in observation]
    return np.asarray(observation).tolist()


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def play(client: PolicyClient, env_id: str, episodes: int, seed: int) -> list[float]:
    env = gym.make(env_id)
    returns = []
    try:
        for episode in range(episodes):
            obs, _ = env.reset(seed=seed + episode)
            total, done, first = 0.0, False, True
            while not done:
                action = client.act(obs, session=f"episode-{episode}", reset=first)
                obs, reward, terminated, truncated, _ = env.step(np.asarray(action) if isinstance(action, list) else action)
                total += float(reward)
                done, first = terminated or truncated, False
            returns.append(total)
            print(f"episode {episode} (seed {seed + episode}): return {total:.2f}", flush=True)
    finally:
        env.close()
    return returns


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("run_dir", metavar="RUN_DIR")
    parser.add_argument("--env", default="CartPole-v1", help="the Gymnasium id the run trained on")
    parser.add_argument("--episodes", type=int, default=10)
    parser.add_argument("--seed", type=int, default=500, help="seed of the first episode (rlpar evaluate's --seed)")
    args = parser.parse_args()

    port = free_port()
    # `rlpar serve` as its own process (`python -m rlpar` is the same command without the script on PATH)
    command = [sys.executable, "-m", "rlpar", "serve", args.run_dir, "--port", str(port)]
    server = subprocess.Popen(command, stdout=subprocess.PIPE, text=True)
    try:
        line = server.stdout.readline()  # "serving RUN_DIR on http://127.0.0.1:PORT ...", once it listens
        if not line.startswith("serving "):
            sys.exit(f"rlpar serve did not start (exit {server.wait()})")
        print(line.strip())
        client = PolicyClient("127.0.0.1", port)
        described = client.call("GET", "/")
        print(f"policy: {described['source']['env']}, {described['source']['checkpoint']}, "
              f"recurrent: {described['recurrent']}, actions: {described['actions']}")
        returns = play(client, args.env, args.episodes, args.seed)
        print(f"mean return {np.mean(returns):.2f} over {len(returns)} episodes")
    finally:
        server.send_signal(signal.SIGTERM)  # the server's clean stop, as Ctrl-C
        server.wait(30)


if __name__ == "__main__":
    main()
