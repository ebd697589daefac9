"""The search space, written in the config under `search.space` as nested keys of the run's
config ending in one distribution each:

    space:
      algo:
        lr: {loguniform: [1.0e-4, 3.0e-3]}
        clip: {choice: [0.1, 0.2, 0.3]}

A trial's hyper-parameters are then a flat dict of dotted keys ({"algo.lr": 0.0012, ...}),
applied to the run's config like command-line overrides.
"""

from __future__ import annotations

from omegaconf import DictConfig, OmegaConf

from rlpar.config.search_space import DISTRIBUTIONS, flatten_space, is_distribution


def space_problems(space: dict | None, cfg: DictConfig) -> list[str]:
    """Every problem with the space, for the up-front validation."""
    flat = flatten_space(space)
    if not flat:
        return ["search.space: empty; give at least one key, e.g. search.space.algo.lr.loguniform=[1e-4,1e-3]"]
    problems = []
    for key, spec in flat.items():
        where = f"search.space.{key}"
        if not is_distribution(spec):
            problems.append(f"{where}: expected one of {', '.join(DISTRIBUTIONS)} with its arguments, got {spec!r}")
            continue
        ((kind, args),) = spec.items()
        arity = DISTRIBUTIONS[kind]
        if not isinstance(args, list) or (arity > 1 and len(args) != arity) or not args:
            problems.append(
                f"{where}.{kind}: expected a list of {arity if arity > 1 else 'one or more'} values, got {args!r}"
            )
        elif kind in ("loguniform", "qloguniform") and not all(isinstance(a, (int, float)) and a > 0 for a in args[:2]):
            problems.append(f"{where}.{kind}: bounds must be positive numbers, got {args!r}")
        if OmegaConf.select(cfg, key, default="__missing__") == "__missing__":
            problems.append(f"{where}: {key} is not a key of this run's config")
    return problems


def tune_space(space: dict, *, for_mutation: bool = False) -> dict:
    """{dotted key: a ray.tune search domain}. `for_mutation`: PBT's hyperparam_mutations, where
    a list of values (choice, grid_search) is given as the list: explore moves to a neighbour."""
    from ray import tune

    domains = {}
    for key, spec in flatten_space(space).items():
        ((kind, args),) = spec.items()
        if DISTRIBUTIONS[kind] == 1:
            domains[key] = list(args) if for_mutation else getattr(tune, kind)(list(args))
        else:
            domains[key] = getattr(tune, kind)(*args)
    return domains


def apply_overrides(cfg: DictConfig, overrides: dict) -> None:
    """Set a trial's hyper-parameters (dotted keys) on a run's config."""
    for key, value in overrides.items():
        OmegaConf.update(cfg, key, value, merge=False)
