"""A Gymnasium environment with an invalid-action mask in its Dict observation, for the masking
tests: it counts every masked action taken (class-level, so a test in the same process reads it)."""

from __future__ import annotations

import gymnasium as gym
import numpy as np


class MaskedChoices(gym.Env):
    """Each step `choices` actions, a random subset of them legal (the `action_mask` key, 1:
    legal; at least one). The observation's `obs` points at one legal action: taking it earns
    1, another legal action 0, a masked one -10 and ends the episode (and is counted in
    `masked_taken`). Episodes last `length` steps."""

    masked_taken = 0  # masked actions taken by every instance in this process
    steps_taken = 0

    def __init__(self, choices: int = 6, length: int = 20, legal_fraction: float = 0.5, record: str | None = None,
                 render_mode=None):
        self.choices, self.length, self.legal_fraction = choices, length, legal_fraction
        self.record = record  # a file that gains a line per masked action (environments in other processes)
        self.observation_space = gym.spaces.Dict(
            {
                "obs": gym.spaces.Box(0.0, 1.0, (choices,), np.float32),
                "action_mask": gym.spaces.Box(0, 1, (choices,), np.int8),
            }
        )
        self.action_space = gym.spaces.Discrete(choices)
        self.render_mode = render_mode

    def _draw(self) -> dict:
        mask = (self.np_random.random(self.choices) < self.legal_fraction).astype(np.int8)
        if not mask.any():
            mask[self.np_random.integers(self.choices)] = 1
        self.mask = mask
        self.good = int(self.np_random.choice(np.flatnonzero(mask)))
        pointer = np.zeros(self.choices, np.float32)
        pointer[self.good] = 1.0
        return {"obs": pointer, "action_mask": mask.copy()}

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return self._draw(), {}

    def step(self, action):
        action = int(action)
        type(self).steps_taken += 1
        self.t += 1
        if not self.mask[action]:
            self._count_masked()
            return self._draw(), -10.0, True, False, {"masked_action": True}
        reward = 1.0 if action == self.good else 0.0
        return self._draw(), reward, False, self.t >= self.length, {}

    def _count_masked(self) -> None:
        type(self).masked_taken += 1
        if self.record:
            with open(self.record, "a") as file:
                file.write("masked\n")

    def render(self):
        return np.zeros((8, 8, 3), np.uint8)


class MaskedChoicesBoxActions(MaskedChoices):
    """The same observation with Box actions: a mask that masks nothing, refused by validation."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.action_space = gym.spaces.Box(-1.0, 1.0, (self.choices,), np.float32)

    def step(self, action):
        return super().step(int(np.argmax(action)))  # the highest score's action


class MaskedChoicesWideMask(MaskedChoices):
    """A mask one column wider than the action space: refused by validation."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.action_space = gym.spaces.Discrete(self.choices - 1)


class MaskedMultiChoices(MaskedChoices):
    """MultiDiscrete([3, 4]) actions, masked per factor: the mask has 3 + 4 columns, each factor's
    own in turn, at least one legal choice per factor; a masked choice in any factor ends the episode.
    The pointer `obs` marks one legal column of either factor: choosing it earns 1."""

    NVEC = (3, 4)

    def __init__(self, length: int = 20, record: str | None = None, render_mode=None):
        super().__init__(choices=sum(self.NVEC), length=length, record=record, render_mode=render_mode)
        self.action_space = gym.spaces.MultiDiscrete(list(self.NVEC))

    def _draw(self) -> dict:
        obs = super()._draw()
        start = 0
        for n in self.NVEC:  # each factor at least one legal choice
            if not self.mask[start : start + n].any():
                self.mask[start + int(self.np_random.integers(n))] = 1
            start += n
        obs["action_mask"] = self.mask.copy()
        return obs

    def step(self, action):
        offsets = np.concatenate([[0], np.cumsum(self.NVEC)[:-1]])
        columns = np.asarray(action, np.int64) + offsets
        type(self).steps_taken += 1
        self.t += 1
        if not self.mask[columns].all():
            self._count_masked()
            return self._draw(), -10.0, True, False, {"masked_action": True}
        reward = 1.0 if self.good in columns else 0.0
        return self._draw(), reward, False, self.t >= self.length, {}


class _MaskInInfo:
    """Observes the Dict's `obs` alone and gives the mask in info (`_info`), at reset and every
    step, the final one included."""

    def _info(self) -> dict:
        raise NotImplementedError

    def reset(self, *, seed=None, options=None):
        obs, _ = super().reset(seed=seed, options=options)
        return obs["obs"], self._info()

    def step(self, action):
        obs, reward, terminated, truncated, info = super().step(action)
        return obs["obs"], reward, terminated, truncated, {**info, **self._info()}


class InfoMaskedChoices(_MaskInInfo, MaskedChoices):
    """MaskedChoices giving its mask in `info["action_mask"]` (at reset and every step, the final
    one included) and observing only the pointer, as some Gymnasium environments do
    (env.action_mask_info_key). `info_key` renames it; `mask_until` leaves it out of infos after
    that many steps of an episode."""

    def __init__(self, info_key: str = "action_mask", mask_until: int | None = None, **kwargs):
        super().__init__(**kwargs)
        self.info_key, self.mask_until = info_key, mask_until
        self.observation_space = self.observation_space["obs"]

    def _info(self) -> dict:
        if self.mask_until is not None and self.t > self.mask_until:
            return {"other": 1}
        return {self.info_key: self.mask.copy()}


class InfoMaskedMultiChoices(_MaskInInfo, MaskedMultiChoices):
    """MaskedMultiChoices giving its mask in info as a tuple of per-factor masks (Gymnasium's
    `MultiDiscrete.sample(mask=...)` form), beside a Box observation."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.observation_space = self.observation_space["obs"]

    def _info(self) -> dict:
        return {"action_mask": tuple(np.split(self.mask.copy(), np.cumsum(self.NVEC)[:-1]))}


def masked_actions_in_training(make_cfg, tmp_path, *overrides, iterations: int, name: str = "masked") -> tuple[int, list[dict]]:
    """Train `iterations` iterations of the run `overrides` compose (a small network, no
    checkpoints), its environments writing a line to a `record` file for every masked action
    they are sent, in any process. Built without validation, whose probe's random steps would
    be counted. The masked actions and the iterations' rows."""
    from rlpar.runtime.build import build_trainer

    tmp_path.mkdir(parents=True, exist_ok=True)
    record = tmp_path / f"{name}.txt"
    cfg = make_cfg(*overrides, f"+env.kwargs.record={record}", "model.hidden_sizes=[16]", "checkpoint.every=0",
                   run_dir=tmp_path / "run")
    trainer = build_trainer(cfg)
    try:
        rows = [trainer.train() for _ in range(iterations)]
    finally:
        trainer.close()
    return (record.read_text().count("\n") if record.exists() else 0), rows
