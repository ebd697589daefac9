"""Recurrent states under central inference (rlpar.sampling.inference): the server keeps every
environment's state, indexed by the environment's row of the run, and a request says per row
where the state entering the step comes from, so no state travels in the usual step.

The worker keeps a mirror in the array it hands to `act_raw` (the reply's next state is written
into it, as an acting copy advances its state in place), so what it records in `Batch.states`
and checkpoints is the server's state. Per row a request says:
- CONTINUE: the state the server holds (the mirror is unchanged since the last reply);
- ZERO: zeros (the worker's reset after an autoreset step, or a fresh environment);
- REPEAT: the state that entered the server's previous step (the worker's bootstrap call at a
  rollout's end advanced the server's state; the next rollout's first step starts over from
  the same state);
- SET: the values sent along (anything else: a worker restored from a checkpoint).
"""

from __future__ import annotations

import numpy as np

CONTINUE, ZERO, REPEAT, SET = 0, 1, 2, 3


class StatesLost(RuntimeError):
    """The server does not hold states a request continues from (it was restarted)."""


class ClientStates:
    """A worker's record of what the server holds for its environments."""

    def __init__(self):
        self.held: np.ndarray | None = None  # the server's state of each row after the last reply
        self.entered: np.ndarray | None = None  # the state that entered the server's last step

    def request(self, state: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The codes [N] (int8) for the worker's state array, and the values of the SET rows."""
        codes = np.full(len(state), SET, np.int8)
        codes[~state.any(axis=1)] = ZERO
        if self.held is not None:
            codes[(state == self.entered).all(axis=1) & (codes == SET)] = REPEAT
            codes[(state == self.held).all(axis=1)] = CONTINUE
        return codes, state[codes == SET]

    def replied(self, state: np.ndarray, next_state: np.ndarray) -> None:
        """After a reply: `state` entered the step (the worker's array), `next_state` left it;
        the worker's array now holds the next state."""
        self.entered, self.held = state.copy(), next_state.copy()
        state[:] = next_state


class ServerStates:
    """The server's state of every environment row (float64, as the numpy copies compute), and
    the state that entered each row's latest step; grows to the rows it is asked about."""

    def __init__(self, state_size: int, num_envs: int = 0):
        self.held = np.zeros((num_envs, state_size))
        self.entered = np.zeros((num_envs, state_size))
        self.known = np.zeros(num_envs, bool)

    def enter(self, rows: np.ndarray, codes: np.ndarray, values: np.ndarray) -> np.ndarray:
        """The states [len(rows), S] entering this step, from each row's code (`values`: the SET
        rows' in order); remembered as the entering states for a later REPEAT."""
        if rows.max(initial=-1) >= len(self.held):
            grow = rows.max() + 1 - len(self.held)
            self.held, self.entered = (
                np.concatenate([a, np.zeros((grow, a.shape[1]))]) for a in (self.held, self.entered)
            )
            self.known = np.concatenate([self.known, np.zeros(grow, bool)])
        kept = (codes == CONTINUE) | (codes == REPEAT)
        if not self.known[rows[kept]].all():
            raise StatesLost(
                "central inference holds no recurrent state for some environments (the server restarted); "
                "their worker starts over"
            )
        state = np.where((codes == CONTINUE)[:, None], self.held[rows], self.entered[rows])
        state[codes == ZERO] = 0.0
        state[codes == SET] = values
        self.entered[rows] = state
        return state

    def keep(self, rows: np.ndarray, next_state: np.ndarray) -> None:
        self.held[rows] = next_state
        self.known[rows] = True
