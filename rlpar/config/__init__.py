"""Config checks that run once, before anything starts."""

from rlpar.config.validate import ConfigError, validate_config

__all__ = ["ConfigError", "validate_config"]
