"""A replay storage that keeps each frame of stacked image observations once.

Why: an Atari observation is 4 stacked 84x84 frames, consecutive observations share 3 of them,
and a transition carries next_obs too, so whole stacks cost 56 KB a transition where the new
frame is 7 KB. `FrameStorage` answers RingStorage's calls (`add`, `get`, `size`, checkpoints)
with each frame stored once and the stacks rebuilt at `get`.

How: content, not bookkeeping. Every frame of an incoming obs and next_obs stack is
fingerprinted; a frame equal to one already stored (its bytes compared, not only the
fingerprints) and still recent is shared, any other is written to a ring of frames. A
transition keeps the numbers of its frames. So nothing depends on where the stacks came from:
which environment, its autoreset step, how FrameStackObservation padded an episode's first
stack, or Ape-X's actors writing rollouts to shards in turn; a rebuilt stack is the stored one
bit for bit, and only reuse (the memory saved) depends on that structure.

Eviction: the frames' ring is overwritten oldest first, on its own clock. A transition one of
whose frames was overwritten is *lost*: `get` refuses it, `intact` says so, and `take_lost`
reports it once, after the `add` that lost it, for the sampler to forget. Only frames in the
newer half of the ring's headroom (frame slots beyond one per transition) are reused, so a
transition outlives its place in the transitions' ring as long as transitions bring no more
new frames each than `frame_capacity / capacity` minus half that headroom.
"""

from __future__ import annotations

import functools

import numpy as np

from rlpar.replay.storage import RingStorage

STACKED_FIELDS = ("obs", "next_obs")
_FINGERPRINT_SEED = 0x5EED_F4A3E  # fixed: a resumed run must reuse exactly the frames the first run would


def frame_stack(*, obs_dtype: str, image_shape, channels_last: bool) -> int:
    """Frames per observation when frames can be stored once: uint8 images, channels first,
    more than one channel (a stack whose channels are whole frames, contiguous in a row); else 0."""
    image_shape = tuple(image_shape or ())
    if np.dtype(obs_dtype) != np.uint8 or len(image_shape) != 3 or channels_last or image_shape[0] < 2:
        return 0
    return int(image_shape[0])


def frame_capacity(capacity: int, frames_per_transition: float) -> int:
    return max(int(np.ceil(capacity * frames_per_transition)), capacity + 2)


def replay_storage(*, capacity: int, fields: dict, stack: int = 0, frames_per_transition: float = 1.125):
    """A FrameStorage for `stack` > 0 (see frame_stack), else a RingStorage."""
    if stack:
        return FrameStorage(
            capacity=capacity,
            fields=fields,
            stack=stack,
            frame_capacity=frame_capacity(capacity, frames_per_transition),
        )
    return RingStorage(capacity=capacity, fields=fields)


def fingerprints(planes: np.ndarray) -> np.ndarray:
    """A 64-bit linear hash of each row of uint8 `planes` [K, F]: a lookup key only (equal
    fingerprints are confirmed by comparing bytes)."""
    planes = np.ascontiguousarray(planes)
    pad = -planes.shape[1] % 8
    if pad:
        planes = np.concatenate([planes, np.zeros((len(planes), pad), np.uint8)], axis=1)
    words = planes.view(np.uint64)
    return words @ _odd_multipliers(words.shape[1])  # wraps modulo 2**64


@functools.lru_cache(maxsize=4)
def _odd_multipliers(count: int) -> np.ndarray:
    """The hash's fixed odd 64-bit multipliers, drawn once per row width (not at every add)."""
    multipliers = np.random.default_rng(_FINGERPRINT_SEED).integers(0, 2**63, count, dtype=np.uint64)
    multipliers = (multipliers << np.uint64(1)) | np.uint64(1)
    multipliers.flags.writeable = False
    return multipliers


def _equal_rows(left: np.ndarray, right: np.ndarray) -> np.ndarray:
    """Row by row, whether two [K, F] uint8 arrays hold the same bytes (8 at a time where F allows)."""
    if left.shape[1] % 8 == 0:
        left, right = left.view(np.uint64), right.view(np.uint64)
    return (left == right).all(axis=1)


class FrameStorage:
    def __init__(self, *, capacity: int, fields: dict, stack: int, frame_capacity: int):
        """`fields`: RingStorage's, `obs` and `next_obs` uint8 rows of `stack` frames each;
        `frame_capacity`: frames kept (more than `capacity`: see the module's docstring)."""
        obs_shape, obs_dtype = fields["obs"]
        if fields["next_obs"] != fields["obs"] or np.dtype(obs_dtype) != np.uint8 or len(obs_shape) != 1:
            raise ValueError("frame storage needs obs and next_obs as uint8 rows of one shape")
        if stack < 1 or obs_shape[0] % stack:
            raise ValueError(f"rows of {obs_shape[0]} values do not split into {stack} frames")
        if frame_capacity <= capacity:
            raise ValueError(f"frame_capacity ({frame_capacity}) must exceed capacity ({capacity})")
        self.fields = {name: (tuple(shape), np.dtype(dtype)) for name, (shape, dtype) in fields.items()}
        self.capacity, self.stack, self.frame_capacity = int(capacity), int(stack), int(frame_capacity)
        self.frame_size = int(obs_shape[0]) // stack
        self.share_window = max(1, (self.frame_capacity - self.capacity) // 2)  # oldest frame reused, in frames
        self._items = RingStorage(capacity=capacity, fields=self._item_fields(fields, stack))
        self._frames = np.zeros((self.frame_capacity, self.frame_size), np.uint8)  # row f % frame_capacity
        self._prints = np.zeros(self.frame_capacity, np.uint64)
        self._newest: dict[int, int] = {}  # fingerprint -> newest stored frame with it
        self._written = 0  # frames written; frame f is stored while f >= written - frame_capacity
        self._low_water = np.iinfo(np.int64).max  # at most the oldest frame of any intact item
        self._reported_below = 0  # items whose oldest frame is below this were reported lost
        self._lost: list[np.ndarray] = []

    @staticmethod
    def _item_fields(fields: dict, stack: int) -> dict:
        kept = {name: spec for name, spec in fields.items() if name not in STACKED_FIELDS}
        numbers = ((stack,), np.int64)
        return {**kept, "obs_frames": numbers, "next_obs_frames": numbers, "oldest_frame": ((), np.int64)}

    @staticmethod
    def bytes_per_item(fields: dict, stack: int, frames_per_transition: float) -> float:
        """Bytes per unit of capacity: a transition without its stacks, with its frame numbers,
        and its share of the frames' ring (a frame, its fingerprint, about 100 B of the
        fingerprint index, a dict)."""
        frame_bytes = int(np.prod(fields["obs"][0])) // stack
        item = RingStorage.required_bytes(1, FrameStorage._item_fields(fields, stack))
        return item + frames_per_transition * (frame_bytes + 8 + 100)

    @property
    def size(self) -> int:
        return self._items.size

    def __len__(self) -> int:
        return self._items.size

    @property
    def frames_stored(self) -> int:
        return min(self._written, self.frame_capacity)

    def _oldest_kept(self) -> int:
        return self._written - self.frame_capacity

    def add(self, items: dict[str, np.ndarray]) -> np.ndarray:
        """Write a batch of transitions (every field, same leading length); returns their slots.
        Call `take_lost` after it."""
        if set(items) != set(self.fields):
            raise ValueError(f"replay items have fields {sorted(items)}, the storage holds {sorted(self.fields)}")
        n = len(items["obs"])
        for name in STACKED_FIELDS:
            if np.shape(items[name]) != (n, *self.fields[name][0]):
                raise ValueError(
                    f"replay field {name!r}: expected shape {(n, *self.fields[name][0])}, got {np.shape(items[name])}"
                )
        planes = np.concatenate(
            [np.asarray(items[name], np.uint8).reshape(n * self.stack, self.frame_size) for name in STACKED_FIELDS]
        )
        numbers = self._store_frames(planes).reshape(2, n, self.stack)
        slots = self._items.add(
            {
                **{name: value for name, value in items.items() if name not in STACKED_FIELDS},
                "obs_frames": numbers[0],
                "next_obs_frames": numbers[1],
                "oldest_frame": numbers.min(axis=(0, 2)),
            }
        )
        self._find_lost(slots)
        return slots

    def _store_frames(self, planes: np.ndarray) -> np.ndarray:
        """The frame number of each plane: an equal recent frame's, or a newly written one's."""
        prints = fingerprints(planes)
        _, first, inverse = np.unique(prints, return_index=True, return_inverse=True)
        owner = first[inverse.reshape(-1)]  # the first plane in the batch with the same fingerprint
        copies = np.flatnonzero(owner != np.arange(len(planes)))
        collided = copies[~_equal_rows(planes[copies], planes[owner[copies]])]
        owner[collided] = collided  # same fingerprint, other bytes: stored on its own
        owners = np.unique(owner)
        number_of = np.full(len(planes), -1, np.int64)  # by owner
        candidates = np.array([self._newest.get(p, -1) for p in prints[owners].tolist()], np.int64)
        recent = (candidates >= 0) & (candidates >= self._written - self.share_window)
        check = owners[recent]
        equal = _equal_rows(self._frames[candidates[recent] % self.frame_capacity], planes[check])
        number_of[check[equal]] = candidates[recent][equal]
        new = owners[number_of[owners] < 0]
        if len(new) > self.frame_capacity:
            raise ValueError(f"a batch of {len(new)} new frames does not fit a ring of {self.frame_capacity}")
        numbers = self._written + np.arange(len(new), dtype=np.int64)
        rows = numbers % self.frame_capacity
        for fingerprint, old in zip(self._prints[rows].tolist(), (numbers - self.frame_capacity).tolist()):
            if old >= 0 and self._newest.get(fingerprint) == old:
                del self._newest[fingerprint]  # its frame is being overwritten
        self._frames[rows] = planes[new]
        self._prints[rows] = prints[new]
        self._newest.update(zip(prints[new].tolist(), numbers.tolist()))
        self._written += len(new)
        number_of[new] = numbers
        return number_of[owner]

    def _find_lost(self, new_slots: np.ndarray) -> None:
        """Items whose oldest frame the latest write overwrote (reported once, by take_lost)."""
        oldest_kept = self._oldest_kept()
        oldest = self._oldest_frames()
        new_oldest = oldest[new_slots]
        if self._lost:  # not taken yet: items since overwritten by these new ones are not lost
            self._lost = [slots[~np.isin(slots, new_slots)] for slots in self._lost]
        lost = [new_slots[new_oldest < oldest_kept]]
        kept_new = new_oldest[new_oldest >= oldest_kept]
        if len(kept_new):
            self._low_water = min(self._low_water, int(kept_new.min()))
        if oldest_kept > self._low_water:  # some older item may have just lost a frame: look
            filled = oldest[: self.size]
            is_new = np.zeros(self.size, bool)
            is_new[new_slots] = True
            lost.append(np.flatnonzero((filled < oldest_kept) & (filled >= self._reported_below) & ~is_new))
            intact = filled[filled >= oldest_kept]
            self._low_water = int(intact.min()) if len(intact) else np.iinfo(np.int64).max
        self._reported_below = max(self._reported_below, oldest_kept)
        lost_items = np.concatenate(lost)
        if len(lost_items):
            self._lost.append(lost_items)

    def _oldest_frames(self) -> np.ndarray:
        return self._items.column("oldest_frame")

    def take_lost(self) -> np.ndarray:
        """Slots lost since the last call (their items may not be sampled again until overwritten)."""
        lost = np.unique(np.concatenate(self._lost)) if self._lost else np.zeros(0, np.int64)
        self._lost = []
        return lost

    def intact(self, slots) -> np.ndarray:
        """Whether every frame of the items in these slots is still stored."""
        return self._oldest_frames()[np.asarray(slots, np.int64)] >= self._oldest_kept()

    def get(self, indices) -> dict[str, np.ndarray]:
        """Copies of the items in these slots, stacks rebuilt; ValueError for a lost item."""
        indices = np.asarray(indices, dtype=np.int64)
        if not self.intact(indices).all():
            raise ValueError("replay items whose frames were overwritten cannot be read (see take_lost)")
        items = self._items.get(indices)
        for name in STACKED_FIELDS:
            rows = items.pop(f"{name}_frames").reshape(-1) % self.frame_capacity
            items[name] = self._frames[rows].reshape(len(indices), self.stack * self.frame_size)
        del items["oldest_frame"]
        return items

    # -- checkpoints ------------------------------------------------------------------------
    def state_dict(self) -> dict:
        """Tensors sharing memory with the stored items and frames (no copy of what may be most
        of the machine's memory); save it before the next `add`."""
        import torch  # the learner checkpoints; actors and shards need no torch

        stored = self.frames_stored
        return {
            "items": self._items.state_dict(),
            "written": self._written,
            "frames": torch.from_numpy(self._frames[:stored]),
            "fingerprints": torch.from_numpy(self._prints[:stored].view(np.int64)),
            "lost": torch.from_numpy(np.concatenate([np.zeros(0, np.int64), *self._lost])),
        }

    def load_state_dict(self, state: dict) -> None:
        if "frames" not in state:
            raise ValueError(
                "this checkpoint's replay holds whole observations; the replay now stores frames once "
                "(algo.replay.frames=false resumes it)"
            )
        written = int(state["written"])
        frames, prints = state["frames"].numpy(), state["fingerprints"].numpy().view(np.uint64)
        stored = min(written, self.frame_capacity)
        if frames.shape != (stored, self.frame_size) or prints.shape != (stored,):
            raise ValueError(
                f"checkpointed replay frames are {tuple(frames.shape)}, expected {(stored, self.frame_size)} "
                f"(frame capacity {self.frame_capacity})"
            )
        self._items.load_state_dict(state["items"])
        self._frames[:stored], self._prints[:stored] = frames, prints
        self._written = written
        # The index as the run left it: each fingerprint's newest stored frame.
        numbers = np.arange(max(written - self.frame_capacity, 0), written, dtype=np.int64)
        self._newest = dict(zip(self._prints[numbers % self.frame_capacity].tolist(), numbers.tolist()))
        self._reported_below = max(self._oldest_kept(), 0)
        oldest = self._oldest_frames()[: self.size]
        intact = oldest[oldest >= self._oldest_kept()]
        self._low_water = int(intact.min()) if len(intact) else np.iinfo(np.int64).max
        lost = state["lost"].numpy()
        self._lost = [lost.copy()] if len(lost) else []
