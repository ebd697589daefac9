"""How `search.space` is written in a config: nested keys of the run's config, each ending in one
Ray Tune distribution. Read by the search that samples it and by the analysis of its results."""

from __future__ import annotations

# ray.tune's distributions -> how many arguments (1: a list of values)
DISTRIBUTIONS = {
    "uniform": 2,
    "loguniform": 2,
    "quniform": 3,
    "qloguniform": 3,
    "randint": 2,
    "choice": 1,
    "grid_search": 1,
}


def is_distribution(node) -> bool:
    return isinstance(node, dict) and len(node) == 1 and next(iter(node)) in DISTRIBUTIONS


def flatten_space(space: dict | None, prefix: str = "") -> dict[str, dict]:
    """{dotted config key: {distribution: arguments}}."""
    flat = {}
    for key, node in (space or {}).items():
        name = f"{prefix}{key}"
        if is_distribution(node):
            flat[name] = node
        elif isinstance(node, dict):
            flat.update(flatten_space(node, name + "."))
        else:
            flat[name] = node  # a constant: refused by space_problems
    return flat
