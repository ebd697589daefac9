"""One naming scheme for dashboards: flat metric keys map to grouped TensorBoard/W&B tags."""

GROUPS = (
    ("episode_", "returns"),
    ("eval_", "returns"),
    ("loss_", "losses"),
    ("time_", "timings"),
    ("policy_lag", "policy_lag"),
    ("fps", "throughput"),
    ("env_steps", "throughput"),
    ("episodes", "throughput"),
    ("live_workers", "workers"),
    ("num_nodes", "workers"),
    ("worker_", "workers"),
    ("env_restarts", "workers"),
)


def tag_for(key: str) -> str:
    for prefix, group in GROUPS:
        if key.startswith(prefix):
            return f"{group}/{key}"
    return f"train/{key}"
