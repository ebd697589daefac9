"""An exported policy (rlpar export --format onnx) played by onnxruntime alone, in a process that
never imports torch (nor rlpar): the model and its sidecar JSON are all it reads.

    python tests/onnx_rollout.py MODEL.onnx ENV_ID STEPS SEED OUT.npz

Plays STEPS steps one observation at a time from a reset seeded SEED, the recurrent state carried
and zeroed at each episode's start, and saves the observations, actions and episode starts, with
the states after them, and the actions of the first observations fed at once (a batch: the batch
dimension is dynamic).
"""

import json
import sys
from pathlib import Path

import gymnasium as gym
import numpy as np
import onnxruntime

BATCH = 7


def main(model: str, env_id: str, steps: int, seed: int, out: str) -> None:
    sidecar = json.loads(Path(f"{model}.json").read_text())
    names = [item["name"] for item in sidecar["inputs"]]
    session = onnxruntime.InferenceSession(model, providers=["CPUExecutionProvider"])
    assert [i.name for i in session.get_inputs()] == names, (session.get_inputs(), names)
    state_size = sidecar["state_size"]

    def run(obs: np.ndarray, state: np.ndarray | None):
        feed = {"obs": obs.astype(np.float32)} | ({"state": state} if state_size else {})
        outputs = session.run(None, feed)
        return outputs[0], outputs[1] if state_size else None

    zero = np.zeros((1, state_size), np.float32) if state_size else None
    env = gym.make(env_id)
    obs, _ = env.reset(seed=seed)
    state, start = zero, True
    observations, actions, starts, states = [], [], [], []
    for _ in range(steps):
        action, state = run(obs[None], state)
        observations.append(obs)
        actions.append(action[0])
        starts.append(start)
        states.append(state[0] if state_size else np.zeros(0, np.float32))
        obs, _, terminated, truncated, _ = env.step(action[0])
        start = terminated or truncated
        if start:
            obs, _ = env.reset()
            state = zero
    env.close()
    batch_state = np.zeros((BATCH, state_size), np.float32) if state_size else None
    batch_actions, _ = run(np.stack(observations[:BATCH]), batch_state)
    assert "torch" not in sys.modules, "onnxruntime's side imported torch"
    np.savez(out, observations=np.stack(observations), actions=np.stack(actions), starts=np.array(starts),
             states=np.stack(states), batch_actions=batch_actions)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5])
