"""Config checks that run once, before anything starts, and the resolvers configs use."""

from rlpar.config.benchmark_rows import register as _register_benchmark_rows
from rlpar.config.resolvers import register as _register_resolvers
from rlpar.config.validate import ConfigError, validate_config

_register_resolvers()
_register_benchmark_rows()

__all__ = ["ConfigError", "validate_config"]
