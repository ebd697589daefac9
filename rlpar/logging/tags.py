"""One naming scheme for dashboards: flat metric keys map to grouped TensorBoard/W&B tags."""

GROUPS = (
    ("episode_", "returns"),
    ("team_", "returns"),  # multi-agent: the team's return and episode length
    ("agent_return", "returns"),
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
    ("node_loss_restarts", "workers"),
)


def tag_for(key: str) -> str:
    """`loss_policy` -> losses/loss_policy; a policy's own metric (multi-agent, `<policy>/<key>`)
    under the policy's name: `speaker/loss_policy` -> speaker/losses/loss_policy."""
    policy, _, own = key.rpartition("/")
    if policy:
        return f"{policy}/{tag_for(own)}"
    for prefix, group in GROUPS:
        if key.startswith(prefix):
            return f"{group}/{key}"
    return f"train/{key}"
