"""OmegaConf resolvers rlpar's configs use; registered when `rlpar.config` is imported."""

from omegaconf import OmegaConf


def ceil_div(total: int, parts: int) -> int:
    """Environments per worker that keep about `total` environments whatever `workers` is."""
    return max(1, -(-int(total) // max(int(parts), 1)))


def register() -> None:
    if not OmegaConf.has_resolver("rlpar.ceil_div"):
        OmegaConf.register_new_resolver("rlpar.ceil_div", ceil_div)
