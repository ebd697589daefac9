"""V-trace off-policy value targets and policy-gradient advantages (IMPALA, Espeholt et al. 2018).

The actors act with a behaviour policy mu that lags the learner's target policy pi, so the
learner corrects its n-step targets with truncated importance ratios pi / mu:
  * rho = min(rho_bar, pi / mu) weighs each TD error; rho_bar decides which policy's value
    function the targets converge to (rho_bar = inf: pi's; smaller: closer to mu's);
  * c = lambda * min(c_bar, pi / mu) is the trace cutting: how far a TD error flows back in time.
    c_bar only changes the speed of convergence, so it can be small without biasing the fixed point.

Episode boundaries follow rlpar.learning.estimators.gae exactly: no bootstrap after a termination, a
truncation bootstraps from V(final observation) (`values[t + 1]`, or `bootstrap_value` on the
last step), autoreset steps (`valid` False) are not transitions, and nothing flows across an
episode boundary. On-policy (pi == mu) with lambda equal to GAE's, the targets are GAE's returns.
"""

from __future__ import annotations

import numpy as np


def compute_vtrace(
    *,
    behaviour_logp: np.ndarray,
    target_logp: np.ndarray,
    rewards: np.ndarray,
    values: np.ndarray,
    bootstrap_value: np.ndarray,
    terminated: np.ndarray,
    truncated: np.ndarray,
    valid: np.ndarray,
    gamma: float,
    clip_rho_threshold: float = 1.0,
    clip_c_threshold: float = 1.0,
    clip_pg_rho_threshold: float | None = None,
    vtrace_lambda: float = 1.0,
) -> tuple[np.ndarray, np.ndarray]:
    """Value targets `vs` and policy-gradient advantages, both [T, N], for time-major arrays.

    `values` and `bootstrap_value` are the learner's values (of each step's observation and of
    the observation after the last step). `clip_pg_rho_threshold` (default: `clip_rho_threshold`)
    truncates the ratio that weighs the policy gradient separately from the one in the targets.
    On autoreset steps the target is the value itself and the advantage is 0.
    """
    if clip_pg_rho_threshold is None:
        clip_pg_rho_threshold = clip_rho_threshold
    values = values.astype(np.float64)
    bootstrap_value = bootstrap_value.astype(np.float64)
    with np.errstate(over="ignore"):  # a huge ratio is clipped anyway; inf is fine here
        ratios = np.exp(target_logp.astype(np.float64) - behaviour_logp.astype(np.float64))
    rhos = np.minimum(clip_rho_threshold, ratios)
    cs = vtrace_lambda * np.minimum(clip_c_threshold, ratios)
    next_values = _final_values(values=values, bootstrap_value=bootstrap_value, terminated=terminated)
    continues = ~(terminated | truncated)
    deltas = rhos * (rewards + gamma * next_values - values)
    corrections = _discounted_traces(deltas=deltas, cs=cs, continues=continues, valid=valid, gamma=gamma)
    vs = values + corrections
    # The policy gradient bootstraps from the corrected target of the next step while the episode
    # goes on, and from the same value the TD error used where it ends (V(final obs) or 0).
    next_vs = np.where(continues, np.concatenate([vs[1:], bootstrap_value[None]], axis=0), next_values)
    pg_rhos = np.minimum(clip_pg_rho_threshold, ratios)
    pg_advantages = np.where(valid, pg_rhos * (rewards + gamma * next_vs - values), 0.0)
    return vs.astype(np.float32), pg_advantages.astype(np.float32)


def _final_values(*, values: np.ndarray, bootstrap_value: np.ndarray, terminated: np.ndarray) -> np.ndarray:
    """V of the observation after each step: the next step's value (which, after a truncation, is
    V(final observation) under next-step autoreset), `bootstrap_value` after the last step, and 0
    after a termination, where there is nothing left to earn."""
    next_values = np.concatenate([values[1:], bootstrap_value[None]], axis=0)
    return np.where(terminated, 0.0, next_values)


def _discounted_traces(
    *, deltas: np.ndarray, cs: np.ndarray, continues: np.ndarray, valid: np.ndarray, gamma: float
) -> np.ndarray:
    """vs - V, from the recursion vs_t - V_t = delta_t + gamma * c_t * (vs_{t+1} - V_{t+1}),
    run backwards so each step costs one vector operation over the environments. The carry is
    cut at episode ends and is zero on autoreset steps, so it never crosses a boundary."""
    corrections = np.zeros(deltas.shape, dtype=np.float64)
    carry = np.zeros(deltas.shape[1], dtype=np.float64)
    for t in range(deltas.shape[0] - 1, -1, -1):
        carried = np.where(continues[t], gamma * cs[t] * carry, 0.0)
        carry = np.where(valid[t], deltas[t] + carried, 0.0)
        corrections[t] = carry
    return corrections


def offpolicy_metrics(target_logp: np.ndarray, behaviour_logp: np.ndarray, valid: np.ndarray) -> dict:
    """How far the policy that learns is from the one that acted, over a batch's valid steps: the
    mean |log pi/mu| (`offpolicy_log_ratio`) and the share of steps whose pi/mu lies outside
    [0.8, 1.2], PPO's default clip range (`offpolicy_clip_fraction`). Lag shows in these before it
    shows in returns."""
    log_ratio = (np.asarray(target_logp, np.float64) - behaviour_logp)[valid]
    if not log_ratio.size:
        return {"offpolicy_log_ratio": 0.0, "offpolicy_clip_fraction": 0.0}
    return {
        "offpolicy_log_ratio": float(np.abs(log_ratio).mean()),
        "offpolicy_clip_fraction": float((np.abs(np.expm1(log_ratio)) > 0.2).mean()),
    }
