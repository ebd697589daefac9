"""What a resumed run may change from the config it was started with, and what it may not."""

from __future__ import annotations

from rlpar.errors import shown

# Keys a user may change when resuming (e.g. to train longer); everything else comes from the run.
RESUME_OVERRIDABLE = ("total_steps", "time_limit_s", "progress", "checkpoint.every", "checkpoint.keep", "eval_episodes", "resume_envs",
                      # a run may resume with more or fewer learners (rank 0's state is the run's)
                      "learners", "learner_group.timeout_s", "learner_group.max_restarts", "ray.cpus_per_learner")
WHERE_THE_RUN_IS = ("run_dir", "resume")  # a run directory may be moved, and is resumed under its new name
_ABSENT = object()


def resume_change_problems(keys) -> list[str]:
    """One line for each of `keys` (set on a resume's command line) that a resume may not change."""
    return [f"{key}: cannot be changed when resuming (the run continues with its own config; "
            f"only {', '.join(RESUME_OVERRIDABLE)} can)"
            for key in keys if key not in RESUME_OVERRIDABLE and key != "resume" and not key.startswith("hydra")]


def config_mismatches(config: dict, checkpoint_config: dict, *, sections: tuple[str, ...] | None = None) -> list[str]:
    """What `config` (a run's config.yaml, as it would run now) changes from the config its
    checkpoint was made with, one `key (checkpoint A, config.yaml B)` each. Keys a resume may
    change are left out; only `sections` are compared when given."""
    saved, now = _flat(checkpoint_config), _flat(config)
    ignored = set(RESUME_OVERRIDABLE) | set(WHERE_THE_RUN_IS)
    keys = sorted(key for key in set(saved) | set(now)
                  if key not in ignored and saved.get(key, _ABSENT) != now.get(key, _ABSENT)
                  and (sections is None or key.split(".", 1)[0] in sections))
    return [f"{key} (checkpoint {_shown(saved.get(key, _ABSENT))}, config.yaml {_shown(now.get(key, _ABSENT))})"
            for key in keys]


def _flat(config: dict, prefix: str = "") -> dict:
    flat = {}
    for key, value in config.items():
        if isinstance(value, dict) and value:
            flat.update(_flat(value, f"{prefix}{key}."))
        else:
            flat[f"{prefix}{key}"] = value
    return flat


def _shown(value) -> str:
    return "absent" if value is _ABSENT else shown(value)
