"""OmegaConf resolvers rlpar's configs use; registered when `rlpar.config` is imported."""

from omegaconf import OmegaConf


def ceil_div(total: int, parts: int) -> int:
    """Environments per worker that keep about `total` environments whatever `workers` is."""
    return max(1, -(-int(total) // max(int(parts), 1)))


def steps_per_env(total_steps: int, min_steps: int = 1, *, _root_) -> int:
    """Rollout length that keeps about `total_steps` per iteration over all environments, and
    at least `min_steps` (many environments then make larger iterations, not shorter rollouts)."""
    return max(int(min_steps), ceil_div(total_steps, int(_root_.workers) * int(_root_.envs_per_worker)))


ENV_NAME_CHARS = 64  # of a run folder's name, which the file system allows 255 bytes in all


def env_name(env_id, entry_point) -> str:
    """The environment trained, as a folder name: `CartPole-v1`, or `MyEnv` for `pkg.mod:MyEnv`
    (the entry point when both are set: it is what make_env builds). Cut short, so that an
    absurd id reaches validation, which names it, instead of failing Hydra's mkdir."""
    name = str(entry_point).replace(":", ".").rsplit(".", 1)[-1] if entry_point else (env_id or "env")
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in str(name)[:ENV_NAME_CHARS])


def register() -> None:
    for name, resolver in (
        ("rlpar.ceil_div", ceil_div),
        ("rlpar.steps_per_env", steps_per_env),
        ("rlpar.env_name", env_name),
    ):
        if not OmegaConf.has_resolver(name):
            OmegaConf.register_new_resolver(name, resolver)
