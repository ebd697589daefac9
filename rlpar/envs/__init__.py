"""Environment layer: resolving ids and classes, old-gym adaptation, vectorisation, action mapping."""

from rlpar.envs.factory import EnvSpec, env_seeds, make_env, make_vector_env, resolve_env_spec
from rlpar.envs.memory import register_memory_envs
from rlpar.envs.toy import register_toy_envs

register_toy_envs()  # rlpar/PixelGridWorld-v0 and friends, in every process that builds environments
register_memory_envs()  # rlpar/MemoryCue-v0 and the classic-control tasks without velocities

__all__ = ["EnvSpec", "env_seeds", "make_env", "make_vector_env", "resolve_env_spec"]
