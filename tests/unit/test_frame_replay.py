"""Frames stored once (rlpar.replay.frames) against the stacks real Atari environments produced.

Rollouts are recorded from ale-py's Breakout through rlpar's own preprocessing (4 stacked 84x84
frames, FrameStackObservation padding an episode's first stack with its reset frame), stepped
the way rlpar's RolloutWorker steps them (Gymnasium's next-step autoreset, `valid` False on the
autoreset step), with short time limits and life losses as episode ends so that a few hundred
steps cross many episode boundaries. Their n-step transitions go into a plain RingStorage (the
reference: the environment's stacks, copied) and into a FrameStorage, with the same slots; every
item read back, and every sampled one, must be the reference's bit for bit, through ring
wraparound, lost items and a checkpoint."""

import io

import numpy as np
import pytest
import torch

from rlpar.envs.factory import env_seeds, make_vector_env, resolve_env_spec
from rlpar.envs.spaces import describe_observation_space
from rlpar.replay import NStepWriter, PrioritizedSampler, RingStorage, UniformSampler
from rlpar.replay.frames import FrameStorage, fingerprints, frame_stack, replay_storage
from rlpar.replay.settings import ReplaySettings
from rlpar.replay.shard import ReplayTable, transition_fields

NUM_ENVS, ROLLOUT, ROLLOUTS = 3, 8, 24
OBS_DIM = 4 * 84 * 84


@pytest.fixture(scope="module")
def rollouts():
    """ROLLOUTS rollouts of NUM_ENVS Breakout environments, random actions, as RolloutWorker
    lays them out (obs before each step, valid False on autoreset steps, last_obs after)."""
    pytest.importorskip("ale_py", reason="ale-py is not installed (pip install ale-py==0.12.1)")
    spec = resolve_env_spec(id="ALE/Breakout-v5", kwargs={"repeat_action_probability": 0.25},
                            atari={"terminal_on_life_loss": True}, max_episode_steps=40)
    venv = make_vector_env(spec, NUM_ENVS)
    raw, _ = venv.reset(seed=env_seeds(spec, NUM_ENVS, 3))
    rng = np.random.default_rng(0)
    obs, pending, batches = raw.reshape(NUM_ENVS, -1), np.zeros(NUM_ENVS, bool), []
    for _ in range(ROLLOUTS):
        batch = {key: [] for key in ("obs", "actions", "rewards", "terminated", "truncated", "valid")}
        for _ in range(ROLLOUT):
            actions = rng.integers(0, venv.single_action_space.n, NUM_ENVS)
            batch["obs"].append(obs)
            batch["actions"].append(actions)
            batch["valid"].append(~pending)
            raw, rewards, terminated, truncated, _ = venv.step(actions)
            batch["rewards"].append(rewards.astype(np.float32))
            batch["terminated"].append(terminated)
            batch["truncated"].append(truncated)
            pending = (terminated | truncated) & ~pending
            obs = raw.reshape(NUM_ENVS, -1)
        batches.append({**{key: np.stack(values) for key, values in batch.items()}, "last_obs": obs.copy(),
                        "env_ids": np.arange(NUM_ENVS)})
    venv.close()
    return batches


def transitions_of(rollouts, n=3):
    writer = NStepWriter(n=n, gamma=0.99)
    return [writer.add(**rollout) for rollout in rollouts]


def fields():
    return transition_fields(OBS_DIM, "uint8")


def stored(chunk, names):
    return {name: chunk[name] for name in names}


def assert_same_items(storage, reference, slots):
    got, expected = storage.get(slots), reference.get(slots)
    assert set(got) == set(expected)
    for name in expected:
        np.testing.assert_array_equal(got[name], expected[name], err_msg=name)


def test_the_recorded_rollouts_cross_episode_boundaries(rollouts):
    """The data the other tests rely on: reset stacks (4 equal frames) as obs, autoreset steps,
    terminations (life losses) and truncations (the time limit), and stacks that shift."""
    valid = np.concatenate([r["valid"] for r in rollouts])
    assert (~valid).sum() >= 6
    assert np.concatenate([r["terminated"] for r in rollouts]).any()
    assert np.concatenate([r["truncated"] for r in rollouts]).any()
    frames = np.concatenate([r["obs"] for r in rollouts]).reshape(-1, NUM_ENVS, 4, 84 * 84)
    reset_stacks = (frames[:, :, :1] == frames).all(axis=(2, 3))
    assert reset_stacks.sum() >= 6
    np.testing.assert_array_equal(frames[1:, :, :3][valid[:-1]], frames[:-1, :, 1:][valid[:-1]])


@pytest.mark.parametrize("n", [1, 3])
def test_every_item_is_the_environments_stacks_through_wraparound(rollouts, n):
    chunks = transitions_of(rollouts, n)
    capacity = 50  # about 12 rollouts' transitions over 24 rollouts: the rings wrap around twice
    frames = FrameStorage(capacity=capacity, fields=fields(), stack=4, frame_capacity=2 * capacity)
    reference = RingStorage(capacity=capacity, fields=fields())
    for chunk in chunks:
        slots = frames.add(stored(chunk, frames.fields))
        np.testing.assert_array_equal(slots, reference.add(stored(chunk, reference.fields)))
        assert len(frames.take_lost()) == 0  # enough frame slots: no item outlives its frames
        assert_same_items(frames, reference, np.arange(reference.size))
    inserted = sum(len(chunk["actions"]) for chunk in chunks)
    # Each frame once: about one new frame per transition, not 8 (plus episodes' first frames).
    assert frames._written < 1.5 * inserted
    assert frames.frames_stored == 2 * capacity


def test_lost_items_are_reported_once_refused_and_never_sampled(rollouts):
    """Too few frame slots (8 beyond one per transition, so only the newest 4 frames are shared:
    each rollout's transitions bring their own first stacks), so frames are overwritten before
    their transitions."""
    chunks = transitions_of(rollouts)
    capacity = 60
    frames = FrameStorage(capacity=capacity, fields=fields(), stack=4, frame_capacity=capacity + 8)
    reference = RingStorage(capacity=capacity, fields=fields())
    uniform, prioritized = UniformSampler(seed=1), PrioritizedSampler(capacity=capacity, beta_steps=10, seed=1)
    reported = set()
    for chunk in chunks:
        slots = frames.add(stored(chunk, frames.fields))
        reference.add(stored(chunk, reference.fields))
        for sampler in (uniform, prioritized):
            sampler.on_insert(slots)
        lost = frames.take_lost()
        assert not reported.intersection(set(lost.tolist()) - set(slots.tolist()))  # once each
        reported = (reported - set(slots.tolist())) | set(lost.tolist())
        for sampler in (uniform, prioritized):
            sampler.forget(lost)
        every = np.arange(frames.size)
        np.testing.assert_array_equal(~frames.intact(every), np.isin(every, sorted(reported)))
        for slot in lost[:2]:
            with pytest.raises(ValueError, match="overwritten"):
                frames.get([slot])
        for sampler in (uniform, prioritized):
            drawn, _ = sampler.sample(batch_size=32, size=frames.size)
            assert frames.intact(drawn).all()
            assert_same_items(frames, reference, drawn)
    assert len(reported) > 0


def test_a_checkpoint_resumes_the_storage_exactly(rollouts):
    chunks = transitions_of(rollouts)
    capacity = 40
    first = FrameStorage(capacity=capacity, fields=fields(), stack=4, frame_capacity=capacity + 12)
    for chunk in chunks[:14]:
        first.add(stored(chunk, first.fields))
        first.take_lost()
    buffer = io.BytesIO()
    torch.save(first.state_dict(), buffer)
    buffer.seek(0)
    resumed = FrameStorage(capacity=capacity, fields=fields(), stack=4, frame_capacity=capacity + 12)
    resumed.load_state_dict(torch.load(buffer, weights_only=True))
    for chunk in chunks[14:]:
        np.testing.assert_array_equal(first.add(stored(chunk, first.fields)), resumed.add(stored(chunk, first.fields)))
        np.testing.assert_array_equal(first.take_lost(), resumed.take_lost())
        assert first._written == resumed._written and first._newest == resumed._newest
        every = np.flatnonzero(first.intact(np.arange(first.size)))
        assert_same_items(first, resumed, every)
    with pytest.raises(ValueError, match="whole observations"):
        resumed.load_state_dict(RingStorage(capacity=capacity, fields=fields()).state_dict())


def test_a_replay_shard_serves_the_stacks_its_actors_wrote(rollouts):
    """Ape-X's table: prioritised, the actors' priorities, items lost and re-prioritised."""
    chunks = transitions_of(rollouts)
    limiter = dict(min_size=1, samples_per_insert=1e9, tolerance=1e12, insert_batch=200, sample_batch=16)
    table = ReplayTable(capacity=64, obs_dim=OBS_DIM, obs_dtype="uint8", alpha=0.6, beta_start=0.4, beta_end=1.0,
                        beta_steps=100, seed=0, rate_limiter=limiter, frame_stack=4, frames_per_transition=1.1)
    reference = RingStorage(capacity=64, fields=fields())
    assert isinstance(table.storage, FrameStorage)
    for chunk in chunks:
        table.add(chunk, np.abs(chunk["rewards"]) + 0.5)
        reference.add(stored(chunk, reference.fields))
        drawn = table.sample(16)
        if drawn is None:
            continue
        items, weights, transitions, _ = drawn
        slots = items % 64
        for name, values in reference.get(slots).items():
            np.testing.assert_array_equal(transitions[name], values, err_msg=name)
        table.update_priorities(items, np.ones(16))
    lost = ~table.storage.intact(np.arange(64))
    assert lost.any()  # 1.1 frames per transition is too few for rollouts that share nothing
    np.testing.assert_array_equal(table.sampler.tree.get(np.flatnonzero(lost)), 0.0)


def test_used_for_uint8_image_stacks_only_and_far_smaller():
    atari = describe_observation_space(__import__("gymnasium").spaces.Box(0, 255, (4, 84, 84), np.uint8))
    assert frame_stack(obs_dtype=atari.obs_dtype, image_shape=atari.image_shape, channels_last=atari.channels_last) == 4
    assert frame_stack(obs_dtype="float32", image_shape=(), channels_last=False) == 0
    assert frame_stack(obs_dtype="uint8", image_shape=(96, 96, 3), channels_last=True) == 0
    assert frame_stack(obs_dtype="uint8", image_shape=(1, 84, 84), channels_last=False) == 0
    assert isinstance(replay_storage(capacity=10, fields=fields(), stack=0), RingStorage)
    whole = ReplaySettings.bytes_per_transition(OBS_DIM, "uint8", image_shape=(4, 84, 84), frames=False)
    once = ReplaySettings.bytes_per_transition(OBS_DIM, "uint8", image_shape=(4, 84, 84))
    assert whole == 2 * OBS_DIM + 8 + 4 + 4 + 16
    # a frame per transition and 1/8 more slots, the frame numbers, a fingerprint and its index entry
    assert once == int(np.ceil(8 + 4 + 4 + 8 * 8 + 8 + 1.125 * (84 * 84 + 8 + 100))) + 16
    assert 1_000_000 * once < 9 * 2**30 < 1_000_000 * whole


def colliding_planes(frame_size=84 * 84):
    """Two frames with one fingerprint and other bytes: the linear hash's multipliers read back
    from unit frames (`fingerprints` of a frame holding 1 in word i is multiplier i)."""
    units = np.zeros((2, frame_size), np.uint8)
    units[0, 0], units[1, 8] = 1, 1
    m0, m1 = (int(x) for x in fingerprints(units))
    word1 = (-m0 * pow(m1, -1, 2**64)) % 2**64  # m0 * 1 + m1 * word1 = 0 modulo 2**64
    first = np.zeros(frame_size, np.uint8)
    first[:16] = np.frombuffer(np.array([1, word1], np.uint64).tobytes(), np.uint8)
    second = np.zeros(frame_size, np.uint8)
    assert fingerprints(np.stack([first, second]))[0] == fingerprints(np.stack([first, second]))[1]
    return first, second


def stack_item(obs_planes, next_planes, action=0):
    return {"obs": np.concatenate(obs_planes)[None], "next_obs": np.concatenate(next_planes)[None],
            "actions": np.array([action]), "rewards": np.zeros(1, np.float32), "discounts": np.ones(1, np.float32)}


def test_frames_with_one_fingerprint_and_other_bytes_are_kept_apart():
    a, zeros = colliding_planes()
    rng = np.random.default_rng(0)
    noise = rng.integers(0, 256, (12, 84 * 84), dtype=np.uint8)
    storage = FrameStorage(capacity=8, fields=fields(), stack=4, frame_capacity=12)  # 2 frames reused at most
    items = [stack_item([zeros] * 4, [zeros] * 4),  # frame 0
             stack_item([a, zeros, a, zeros], [zeros, a, zeros, a], 1),  # frame 1: a collides with frame 0
             stack_item(noise[:4], noise[4:8], 2),  # 8 new frames
             stack_item([noise[8]] * 4, [noise[9]] * 4, 3)]  # 2 more: 12 written, all still stored
    slots = [storage.add(item)[0] for item in items]
    assert len(storage.take_lost()) == 0 and storage.intact(slots).all() and storage.frames_stored == 12
    for slot, item in zip(slots, items):
        got = storage.get([slot])
        np.testing.assert_array_equal(got["obs"], item["obs"])
        np.testing.assert_array_equal(got["next_obs"], item["next_obs"])
    later = storage.add(stack_item([a] * 4, [a] * 4, 4))  # a, in frame 1, is too old to reuse: frame 12
    storage.add(stack_item([noise[10]] * 4, [noise[11]] * 4))  # 2 new frames: frame 1 is overwritten
    assert storage.intact(later).all()
    np.testing.assert_array_equal(storage.get(later)["obs"], np.concatenate([a] * 4)[None])
