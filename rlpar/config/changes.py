"""What a resumed run may change from the config it was started with, and what it may not."""

from __future__ import annotations

from rlpar.errors import shown

# Where a run runs, not what it learns: a resume may place it anew, e.g. on a new cluster once
# the old one's head is lost. The sampler's copies of the ray.* values are listed too: a run's
# config.yaml holds them resolved.
PLACEMENT = (
    "ray.address",
    "ray.num_cpus",
    "ray.object_store_mb",
    "ray.cpus_per_worker",
    "parallel.ray_address",
    "parallel.ray_num_cpus",
    "parallel.object_store_mb",
    "parallel.cpus_per_worker",
    "parallel.cpus_per_learner",
    "parallel.start_timeout_s",
    "parallel.rebalance_interval_s",
)
# The sampler's copies of the ray.* values (conf/parallel/distributed.yaml: `${ray.address}`...).
PLACEMENT_COPIES = {
    "parallel.ray_address": "ray.address",
    "parallel.ray_num_cpus": "ray.num_cpus",
    "parallel.object_store_mb": "ray.object_store_mb",
    "parallel.cpus_per_worker": "ray.cpus_per_worker",
    "parallel.cpus_per_learner": "ray.cpus_per_learner",
}
# Group choices a resume may repeat (deploy/slurm passes them on every run): accepted when these
# values, which tell the group's options apart, are the run's own. They change nothing.
REPEATABLE_GROUPS = {"parallel": ("parallel.name",), "hardware": ("hardware.device",)}
# Keys a user may change when resuming (e.g. to train longer); everything else comes from the run.
RESUME_OVERRIDABLE = (
    "total_steps",
    "time_limit_s",
    "progress",
    "checkpoint.every",
    "checkpoint.keep",
    "eval_episodes",
    "eval_stochastic",
    "resume_envs",
    "resume_trust",
    # a run may resume with more or fewer learners (rank 0's state is the run's)
    "learners",
    "learner_group.timeout_s",
    "learner_group.max_restarts",
    "ray.cpus_per_learner",
    *PLACEMENT,
)
WHERE_THE_RUN_IS = ("run_dir", "resume")  # a run directory may be moved, and is resumed under its new name
_ABSENT = object()


def resume_change_problems(keys) -> list[str]:
    """One line for each of `keys` (set on a resume's command line) that a resume may not change."""
    return [
        f"{key}: cannot be changed when resuming (the run continues with its own config; "
        f"only {', '.join(key for key in RESUME_OVERRIDABLE if key not in PLACEMENT)} and where it runs "
        f"({', '.join(key for key in PLACEMENT if key.startswith('ray.'))}...) can)"
        for key in keys
        if key not in RESUME_OVERRIDABLE
        and key not in REPEATABLE_GROUPS
        and key != "resume"
        and not key.startswith("hydra")
    ]


def repeated_group_problems(keys, chosen, saved) -> list[str]:
    """One line for each group of REPEATABLE_GROUPS among `keys` whose option, as composed on
    the command line (`chosen`), is not the run's own (`saved`, its config.yaml)."""
    from omegaconf import OmegaConf

    problems = []
    for group in dict.fromkeys(key for key in keys if key in REPEATABLE_GROUPS):
        for key in REPEATABLE_GROUPS[group]:
            now, then = OmegaConf.select(chosen, key, default=None), OmegaConf.select(saved, key, default=None)
            if now != then:
                problems.append(
                    f"{group}: cannot be changed when resuming ({key} would be {shown(now)}, the run's is "
                    f"{shown(then)}); give the run's own, or leave {group} out"
                )
    return problems


def follow_placement(saved, keys) -> None:
    """Set the sampler's copies (PLACEMENT_COPIES) of those of `keys` that it copies, in `saved`
    (a run's config.yaml, where they were resolved), where `saved` has them."""
    from omegaconf import OmegaConf

    for copy, source in PLACEMENT_COPIES.items():
        if source in keys and OmegaConf.select(saved, copy, default=_ABSENT) is not _ABSENT:
            OmegaConf.update(saved, copy, OmegaConf.select(saved, source))


def config_mismatches(config: dict, checkpoint_config: dict, *, sections: tuple[str, ...] | None = None) -> list[str]:
    """What `config` (a run's config.yaml, as it would run now) changes from the config its
    checkpoint was made with, one `key (checkpoint A, config.yaml B)` each. Keys a resume may
    change are left out; only `sections` are compared when given."""
    saved, now = _flat(checkpoint_config), _flat(config)
    ignored = set(RESUME_OVERRIDABLE) | set(WHERE_THE_RUN_IS)
    keys = sorted(
        key
        for key in set(saved) | set(now)
        if key not in ignored
        and saved.get(key, _ABSENT) != now.get(key, _ABSENT)
        and (sections is None or key.split(".", 1)[0] in sections)
    )
    return [
        f"{key} (checkpoint {_shown(saved.get(key, _ABSENT))}, config.yaml {_shown(now.get(key, _ABSENT))})"
        for key in keys
    ]


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
