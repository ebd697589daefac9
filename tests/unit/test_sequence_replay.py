"""R2D2's sequence replay: sequences cut by hand and against a step-by-step reference (episode
ends, autoreset steps, columns in any order, one environment twice in a batch, a resume), and
the learning pieces (targets, priorities, loss, value rescaling) against direct computations."""

import numpy as np
import pytest
import torch

from rlpar.learning.losses.r2d2 import (masked_weighted_huber, rescale, sequence_priorities, sequence_q_loss, sequence_targets,
                                unrescale)
from rlpar.replay.samplers import PrioritizedSampler
from rlpar.replay.sequences import SequenceWriter, sequence_fields
from rlpar.replay.storage import RingStorage
from tests.episode_flags import covers_every_case
from tests.unit.test_replay import random_rollouts as transition_rollouts
from tests.unit.test_replay import resumed_then_two_rollouts_side_by_side, through_checkpoint


# ---------------------------------------------------------------- sequences by hand

A, B = 7, 3  # global environment ids, deliberately not in column order


def hand_rollouts():
    """Two rollouts of six steps. Column 0 (env A): obs = 100 * rollout + step; autoreset at
    rollout 0 step 0, so its episode starts at step 1; it terminates at rollout 1 step 2, autoreset
    at step 3, a new episode at 4. Column 1 (env B): never ends. States entering a step: [obs, -obs]."""
    out = []
    for r, (term, valid) in enumerate([([0, 0, 0, 0, 0, 0], [0, 1, 1, 1, 1, 1]), ([0, 0, 1, 0, 0, 0], [1, 1, 1, 0, 1, 1])]):
        obs = (100 * r + np.arange(6)[:, None] + 1000 * np.arange(2)[None, :]).astype(np.float32)
        terminated = np.stack([term, np.zeros(6)], axis=1).astype(bool)
        out.append(dict(obs=obs[..., None], actions=obs.astype(np.int64) + 7, rewards=obs / 10,
                        terminated=terminated, truncated=np.zeros((6, 2), bool),
                        valid=np.stack([valid, np.ones(6)], axis=1).astype(bool), env_ids=np.array([A, B]),
                        last_obs=(100 * r + 6 + 1000 * np.arange(2)).astype(np.float32)[:, None],
                        states=np.stack([obs, -obs], axis=-1)))
    return out


def rows_of(out, i):
    """(obs column, the observation after the last real step, terminated rows, initial state)
    of sequence i, padding as None."""
    obs = [float(o) if m else None for o, m in zip(out["obs"][i, :-1, 0], out["mask"][i])]
    return obs, float(out["obs"][i, np.flatnonzero(out["mask"][i])[-1] + 1, 0]), list(np.flatnonzero(out["terminated"][i])), list(out["initial_state"][i])


def test_sequences_by_hand_across_two_rollouts():
    writer = SequenceWriter(burn_in=2, length=4)  # period 2: rows of trained parts start at episode steps 0, 2, 4, ...
    first, second = (writer.add(**ro) for ro in hand_rollouts())
    # Rollout 0. A's episode e0..e4 = obs 1..5: sequence 0 (window e-2..e3, two rows of padding)
    # completes at e3 (step 4). B, first seen mid-way: a real burn-in, window b0..b5 completes at step 5.
    assert list(first["env_ids"]) == [A, B]
    assert rows_of(first, 0) == ([None, None, 1, 2, 3, 4], 5, [], [1, -1])
    assert rows_of(first, 1) == ([1000, 1001, 1002, 1003, 1004, 1005], 1006, [], [1000, -1000])
    # Rollout 1. A: e5 = obs 100 completes sequence 1 (window e0..e5); the termination at e7 =
    # obs 102 completes sequence 2 (e2..e7) and emits sequence 3 (e4..e7, then padding), both
    # bootstrapping from obs 103 (the final observation). B: sequences 1, 2, 3 at steps 1, 3, 5.
    assert list(second["env_ids"]) == [A, B, A, A, B, B]
    assert rows_of(second, 0) == ([1, 2, 3, 4, 5, 100], 101, [], [1, -1])
    assert rows_of(second, 1) == ([1002, 1003, 1004, 1005, 1100, 1101], 1102, [], [1002, -1002])
    assert rows_of(second, 2) == ([3, 4, 5, 100, 101, 102], 103, [5], [3, -3])
    assert rows_of(second, 3) == ([5, 100, 101, 102, None, None], 103, [3], [5, -5])
    assert rows_of(second, 4) == ([1004, 1005, 1100, 1101, 1102, 1103], 1104, [], [1004, -1004])
    assert rows_of(second, 5) == ([1100, 1101, 1102, 1103, 1104, 1105], 1106, [], [1100, -1100])
    # Fields follow their steps: actions and rewards of the real rows, zeros on padding.
    for out in (first, second):
        real = out["mask"]
        np.testing.assert_array_equal(out["actions"][real], out["obs"][:, :-1, 0][real].astype(np.int64) + 7)
        np.testing.assert_allclose(out["rewards"][real], out["obs"][:, :-1, 0][real] / 10)
        assert not out["actions"][~real].any() and not out["rewards"][~real].any()
    assert first["obs"].shape == (2, 7, 1) and first["initial_state"].dtype == np.float32


def test_columns_in_another_order_give_the_same_sequences():
    straight, swapped = SequenceWriter(burn_in=2, length=4), SequenceWriter(burn_in=2, length=4)
    for ro in hand_rollouts():
        flipped = {k: (v[::-1] if k in ("env_ids", "last_obs") else v[:, ::-1]) for k, v in ro.items()}
        a, b = straight.add(**ro), swapped.add(**flipped)
        for key in a:
            np.testing.assert_array_equal(a[key], b[key])


def test_a_termination_inside_the_burn_in_emits_nothing_and_the_next_episode_starts_fresh():
    writer = SequenceWriter(burn_in=3, length=2, period=1)
    ro = hand_rollouts()[1]  # A starts mid-episode and ends two steps later: no trained step yet
    ro = {k: (v[:, :1] if v.ndim > 1 and k not in ("env_ids", "last_obs") else v[:1]) for k, v in ro.items()}
    out = writer.add(**ro)
    # A's second episode (steps 4, 5) starts at episode step 0: trained from its first step.
    assert rows_of(out, 0)[0] == [None, None, None, 104, 105] and list(out["env_ids"]) == [A]
    assert len(out["env_ids"]) == 1


def test_refusals():
    with pytest.raises(ValueError, match="period"):
        SequenceWriter(burn_in=2, length=4, period=5)  # steps between trained parts never trained
    with pytest.raises(ValueError, match="length"):
        SequenceWriter(burn_in=2, length=0)
    writer = SequenceWriter(burn_in=2, length=4)
    ro = hand_rollouts()[0]
    writer.add(**ro)  # B is open
    with pytest.raises(ValueError, match="autoreset"):
        writer.add(**{**ro, "valid": np.ones((6, 2), bool) & (np.arange(2) == 0)[None, :]})


# ---------------------------------------------------------------- sequences against a reference


def reference_sequences(rollouts, burn_in, length, period):
    """The definition, one environment and one step at a time: each environment's episodes kept
    whole; sequence k of an episode covers episode steps k period - burn_in ... k period + length
    - 1 (counted from burn_in before the first step seen, for an environment first seen mid-way),
    emitted when its last step arrives, or at the episode's end once its trained part began."""
    L = burn_in + length
    found = []  # (time, env, k, sequence)
    episodes = {}
    T = rollouts[0]["rewards"].shape[0]
    for r, ro in enumerate(rollouts):
        for c, env in enumerate(ro["env_ids"]):
            env = int(env)
            for t in range(T):
                if not ro["valid"][t, c]:
                    episodes[env] = None  # the next valid step starts an episode
                    continue
                if episodes.get(env, "unseen") is None or env not in episodes:
                    episodes[env] = {"offset": 0 if env in episodes else burn_in, "steps": [], "emitted": 0}
                ep = episodes[env]
                after = ro["obs"][t + 1, c] if t + 1 < T else ro["last_obs"][c]
                ep["steps"].append((ro["obs"][t, c], ro["actions"][t, c], ro["rewards"][t, c], ro["states"][t, c], after,
                                    bool(ro["terminated"][t, c])))
                last = len(ep["steps"]) - 1 - ep["offset"]  # grid position of this step
                ended = bool(ro["terminated"][t, c] or ro["truncated"][t, c])
                while ep["emitted"] * period + length - 1 <= last or ended and ep["emitted"] * period <= last:
                    k = ep["emitted"]
                    seq = {"obs": np.zeros((L + 1, *ro["obs"].shape[2:]), ro["obs"].dtype), "actions": np.zeros(L, np.int64),
                           "rewards": np.zeros(L, np.float32), "terminated": np.zeros(L, bool), "mask": np.zeros(L, bool),
                           "env_ids": env}
                    real = [j for j in range(L) if 0 <= k * period - burn_in + j + ep["offset"] <= last + ep["offset"]]
                    for j in real:
                        o, a, rew, state, after_step, term = ep["steps"][k * period - burn_in + j + ep["offset"]]
                        seq["obs"][j], seq["actions"][j], seq["rewards"][j], seq["terminated"][j] = o, a, rew, term
                        seq["mask"][j] = True
                        seq["obs"][j + 1] = after_step
                        if j == real[0]:
                            seq["initial_state"] = state
                    found.append(((r, t), env, k, seq))
                    ep["emitted"] += 1
                if ended:
                    episodes[env] = None
    found.sort(key=lambda f: f[:3])
    return [f[3] for f in found]


def random_rollouts(seed, T, N, count, obs_dim=2, state_size=3):
    """test_replay's rollouts (one stretch of steps cut into rollouts), with states entering each step."""
    states = np.random.default_rng(seed + 1).normal(size=(count, T, N, state_size)).astype(np.float32)
    return [{**ro, "states": s} for ro, s in zip(transition_rollouts(seed, T, N, count, obs_dim), states)]


def assert_same_sequences(out, expected):
    assert len(out["env_ids"]) == len(expected)
    for key in ("obs", "actions", "rewards", "terminated", "mask", "initial_state", "env_ids"):
        np.testing.assert_array_equal(out[key], np.array([e[key] for e in expected]).reshape(out[key].shape), err_msg=key)


@pytest.mark.parametrize("burn_in, length, period", [(0, 1, 1), (2, 4, 2), (3, 5, 2), (4, 8, 8), (6, 3, 1)])
def test_sequences_match_the_definition_on_random_rollouts(burn_in, length, period):
    rollouts = random_rollouts(seed=18, T=9, N=10, count=4)
    assert all(covers_every_case(ro["terminated"], ro["truncated"], ro["valid"]) for ro in rollouts[1:])
    writer = SequenceWriter(burn_in=burn_in, length=length, period=period)
    outs = [writer.add(**ro) for ro in rollouts]
    joined = {k: np.concatenate([o[k] for o in outs]) for k in outs[0]}
    assert len(joined["env_ids"]) > 10
    assert_same_sequences(joined, reference_sequences(rollouts, burn_in, length, period))


def test_one_environment_twice_in_a_batch_and_resume_from_a_checkpoint():
    rollouts = random_rollouts(seed=11, T=6, N=3, count=3)
    out, expected = resumed_then_two_rollouts_side_by_side(lambda: SequenceWriter(burn_in=2, length=4), rollouts)
    for key in out:
        np.testing.assert_array_equal(out[key], np.concatenate([e[key] for e in expected]), err_msg=key)
    first = SequenceWriter(burn_in=2, length=4)
    first.add(**rollouts[0])
    with pytest.raises(ValueError, match="burn_in"):
        SequenceWriter(burn_in=3, length=4).load_state_dict(first.state_dict())


def test_sequences_fit_a_ring_storage_and_a_prioritized_sampler():
    rollouts = random_rollouts(seed=3, T=8, N=4, count=3, obs_dim=2, state_size=3)
    writer = SequenceWriter(burn_in=2, length=4)
    fields = sequence_fields(obs_dim=2, state_size=3, burn_in=2, length=4)
    storage = RingStorage(capacity=50, fields=fields)
    sampler = PrioritizedSampler(capacity=50, beta_steps=10, seed=0)
    stored = []
    for ro in rollouts:
        out = writer.add(**ro)
        sampler.on_insert(storage.add({name: out[name] for name in fields}))
        stored.append(out)
    slots, weights = sampler.sample(batch_size=4, size=storage.size)
    got = storage.get(slots)
    every = {k: np.concatenate([s[k] for s in stored]) for k in fields}
    for name in fields:
        np.testing.assert_array_equal(got[name], every[name][slots])


# ---------------------------------------------------------------- learning pieces


def test_priorities_mix_the_max_and_the_mean_of_trained_steps():
    td = torch.tensor([[1.0, 2.0], [3.0, 0.5], [10.0, 7.0]])
    mask = torch.tensor([[True, True], [True, True], [False, True]])  # 10.0 is not trained on
    expected = torch.tensor([0.9 * 3 + 0.1 * 2, 0.9 * 7 + 0.1 * (2 + 0.5 + 7) / 3])
    torch.testing.assert_close(sequence_priorities(td, mask), expected)
    torch.testing.assert_close(sequence_priorities(td, mask, eta=0.0), torch.tensor([2.0, 9.5 / 3]))


GAMMA = 0.5


def hand_case():
    """Four steps, two sequences: 0 all real, no end; 1 real steps 0-2 then padding."""
    rewards = torch.tensor([[1.0, 1.0], [2.0, 2.0], [4.0, 4.0], [8.0, 0.0]])
    real = torch.tensor([[1, 1], [1, 1], [1, 1], [1, 0]], dtype=torch.bool)
    # The target network's values; the online network prefers the other action everywhere.
    best = torch.tensor([[10.0, 20.0], [30.0, 40.0], [50.0, 60.0], [70.0, 80.0], [90.0, 100.0]])
    q_target = torch.stack([best, best - 5], dim=-1)  # argmax 0, value best
    q_online = torch.stack([-best, best], dim=-1)  # argmax 1, value best - 5
    return rewards, real, q_target, q_online


@pytest.mark.parametrize("terminated_at_2", [True, False])
def test_two_step_double_q_targets_by_hand(terminated_at_2):
    rewards, real, q_target, q_online = hand_case()
    discounts = torch.full((4, 2), GAMMA)
    if terminated_at_2:
        discounts[2, 1] = 0.0
    targets = sequence_targets(q_target=q_target, q_online=q_online, rewards=rewards, discounts=discounts, real=real, n=2)
    q = q_target[..., 1]  # the target network's value of the online argmax
    expected0 = [1 + 0.5 * 2 + 0.25 * q[2, 0], 2 + 0.5 * 4 + 0.25 * q[3, 0], 4 + 0.5 * 8 + 0.25 * q[4, 0], 8 + 0.5 * q[4, 0]]
    cut = 0.0 if terminated_at_2 else 1.0  # a truncation bootstraps from the observation after step 2
    expected1 = [1 + 0.5 * 2 + 0.25 * q[2, 1], 2 + 0.5 * 4 + cut * 0.25 * q[3, 1], 4 + cut * 0.5 * q[3, 1]]
    torch.testing.assert_close(targets[:, 0], torch.tensor(expected0))
    torch.testing.assert_close(targets[:3, 1], torch.tensor(expected1))
    classic = sequence_targets(q_target=q_target, rewards=rewards, discounts=discounts, real=real, n=2)
    assert classic[3, 0].item() == pytest.approx(8 + 0.5 * q_target[4, 0, 0].item())


def reference_targets(q_target, q_online, rewards, discounts, real, n, value_rescaling):
    L, B = rewards.shape
    h = rescale if value_rescaling else (lambda x: x)
    h_inv = unrescale if value_rescaling else (lambda x: x)
    out = torch.zeros(L, B)
    for b in range(B):
        for t in range(L):
            if not real[t, b]:
                continue
            total, weight, s = 0.0, 1.0, t
            while True:
                total += weight * rewards[s, b]
                weight *= discounts[s, b]
                s += 1
                if s - t == n or s == L or not real[s, b]:
                    break
            a = q_online[s, b].argmax()
            out[t, b] = h(total + weight * h_inv(q_target[s, b, a]))
    return out


@pytest.mark.parametrize("n", [1, 3, 6])
@pytest.mark.parametrize("value_rescaling", [False, True])
def test_targets_match_the_definition_on_random_sequences(n, value_rescaling):
    g = torch.Generator().manual_seed(n)
    L, B, A = 7, 6, 3
    rewards = torch.randn(L, B, generator=g)
    q_target, q_online = torch.randn(L + 1, B, A, generator=g) * 20, torch.randn(L + 1, B, A, generator=g)
    # Each sequence: padding, one real stretch (terminated or not at its end), padding.
    real, discounts = torch.zeros(L, B, dtype=torch.bool), torch.full((L, B), 0.9)
    for b, (start, stop, term) in enumerate([(0, 7, False), (2, 7, True), (0, 4, True), (3, 5, False), (1, 2, True), (0, 6, False)]):
        real[start:stop, b] = True
        discounts[stop - 1, b] = 0.0 if term else 0.9
    targets = sequence_targets(q_target=q_target, q_online=q_online, rewards=rewards, discounts=discounts, real=real, n=n,
                               value_rescaling=value_rescaling)
    expected = reference_targets(q_target, q_online, rewards, discounts, real, n, value_rescaling)
    torch.testing.assert_close(torch.where(real, targets, 0.0), expected, rtol=1e-5, atol=1e-5)


def test_value_rescaling_inverts_and_squashes():
    x = torch.linspace(-1000, 1000, 2001, dtype=torch.float64)
    torch.testing.assert_close(unrescale(rescale(x)), x, rtol=1e-9, atol=1e-7)
    assert rescale(torch.tensor(3.0)).item() == pytest.approx(1 + 3e-3)
    assert rescale(torch.tensor(-99.0)).item() == pytest.approx(-(10 - 1) - 99e-3)


def test_masked_huber_averages_each_sequence_s_trained_steps_then_the_weighted_sequences():
    td = torch.tensor([[0.5, 3.0], [-2.0, 100.0]])
    mask = torch.tensor([[True, True], [True, False]])
    weights = torch.tensor([1.0, 0.5])
    expected = (1.0 * (0.125 + 1.5) / 2 + 0.5 * 2.5) / 2
    assert masked_weighted_huber(td, weights, mask).item() == pytest.approx(expected)


# ---------------------------------------------------------------- the loss on unrolled sequences


class TinyRecurrentQ(torch.nn.Module):
    """A GRU cell and a linear head with the Q-network contract's `q_sequence`: Q at step t from
    the state after obs[t]; the state entering t zeroed after an invalid step t - 1."""

    def __init__(self, obs_dim=2, state_size=4, actions=3, seed=0):
        super().__init__()
        torch.manual_seed(seed)
        self.cell, self.head = torch.nn.GRUCell(obs_dim, state_size), torch.nn.Linear(state_size, actions)

    def q_sequence(self, obs, initial_state, valid):
        state, q = initial_state, []
        for t in range(len(obs)):
            if t > 0:
                state = state * valid[t - 1].unsqueeze(-1)
            state = self.cell(obs[t], state)
            q.append(self.head(state))
        return torch.stack(q), state


def stored_sequences(B=5, burn_in=3, length=4, seed=0):
    """Row-major sequences as replay returns them: rows 0 and 3 front-padded (an episode starts
    at row 3, the first trained one, and at row 1), row 1 terminated at row 5, row 2 truncated
    at row 6, row 4 whole."""
    g = torch.Generator().manual_seed(seed)
    L = burn_in + length
    mask = torch.ones(B, L, dtype=torch.bool)
    mask[0, :3] = False
    mask[3, :1] = False
    mask[1, 6:] = False
    mask[2, 7:] = False
    terminated = torch.zeros(B, L, dtype=torch.bool)
    terminated[1, 5] = True
    obs = torch.randn(B, L + 1, 2, generator=g)
    return dict(obs=obs, actions=torch.randint(0, 3, (B, L), generator=g), rewards=torch.randn(B, L, generator=g),
                terminated=terminated, mask=mask, initial_state=torch.randn(B, 4, generator=g))


def test_sequence_loss_unrolls_the_burn_in_from_the_stored_state_and_trains_after_it():
    burn_in, gamma = 3, 0.9
    model, target = TinyRecurrentQ(seed=0), TinyRecurrentQ(seed=1)
    data = stored_sequences(burn_in=burn_in)
    weights = torch.tensor([1.0, 0.5, 0.25, 1.0, 0.8])
    loss, priorities, q_taken = sequence_q_loss(model=model, target_model=target, **data, weights=weights,
                                                burn_in=burn_in, n=2, gamma=gamma)
    # By hand: one unroll of every row from its stored state over all L + 1 observations.
    time_major = {k: v.transpose(0, 1) for k, v in data.items() if k != "initial_state"}
    valid = torch.cat([time_major["mask"], torch.zeros(1, 5, dtype=torch.bool)])
    q_all = model.q_sequence(time_major["obs"], data["initial_state"], valid)[0][burn_in:]
    q_target_all = target.q_sequence(time_major["obs"], data["initial_state"], valid)[0][burn_in:]
    trained = time_major["mask"][burn_in:]
    discounts = gamma * (~time_major["terminated"][burn_in:]).float()
    targets = reference_targets(q_target_all.detach(), q_all.detach(), time_major["rewards"][burn_in:], discounts,
                                trained, 2, False)
    chosen = q_all[:-1].gather(-1, time_major["actions"][burn_in:].unsqueeze(-1)).squeeze(-1)
    td = torch.where(trained, targets - chosen, 0.0)
    torch.testing.assert_close(priorities, sequence_priorities(td.abs().detach(), trained))
    torch.testing.assert_close(loss, masked_weighted_huber(td, weights, trained))
    torch.testing.assert_close(q_taken, chosen.detach()[trained])
    # No gradient through the burn-in: the same as starting at its end from the burnt-in state
    # (with a target network equal to the online one, whose burnt-in state is then the same).
    target.load_state_dict(model.state_dict())
    loss = sequence_q_loss(model=model, target_model=target, **data, weights=weights, burn_in=burn_in, n=2,
                           gamma=gamma)[0]
    loss.backward()
    with_burn_in = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    with torch.no_grad():
        burnt = model.q_sequence(time_major["obs"][:burn_in], data["initial_state"], valid[:burn_in])[1]
        burnt = torch.where(valid[burn_in - 1].unsqueeze(-1), burnt, 0.0)
    cut = {k: v[:, burn_in:] for k, v in data.items() if k != "initial_state"}
    again, _, _ = sequence_q_loss(model=model, target_model=target, **cut, initial_state=burnt, weights=weights,
                                  burn_in=0, n=2, gamma=gamma)
    again.backward()
    for ours, theirs in zip(with_burn_in, (p.grad for p in model.parameters())):
        torch.testing.assert_close(ours, theirs)
