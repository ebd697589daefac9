"""Environment layer: resolving ids and classes, old-gym adaptation, vectorisation, action mapping."""

from rlpar.envs.factory import EnvSpec, env_seeds, make_env, make_vector_env, resolve_env_spec

__all__ = ["EnvSpec", "env_seeds", "make_env", "make_vector_env", "resolve_env_spec"]
