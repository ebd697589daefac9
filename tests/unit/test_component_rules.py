"""Each component states its own rules next to its code; validation only asks them (through
`_target_`) and reports every problem in one message. And the import graph has no circles."""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest

from rlpar.algos.ppo import PPO
from rlpar.config.validate import ConfigError, validate_config
from rlpar.runtime.build import build_trainer
from rlpar.sampling.local import LocalSampler

ROOT = Path(__file__).resolve().parents[2]
HERE = __name__


class PickySampler(LocalSampler):
    """A sampler with a rule of its own."""

    @classmethod
    def config_problems(cls, config) -> list[str]:
        problems = super().config_problems(config)
        if config.get("envs_per_worker") % 2:
            problems.append("envs_per_worker: PickySampler steps environments in pairs")
        return problems


class PickyPPO(PPO):
    """A user's algorithm with a rule of its own: validation imports it to ask."""

    def __init__(self, config, **built):  # PPO's config (PPO.Config), the builder's arguments
        super().__init__(config, **built)

    @classmethod
    def config_problems(cls, config) -> list[str]:
        return [] if config.get("algo.epochs") == 1 else [f"algo.epochs: PickyPPO takes 1 epoch, got {config.get('algo.epochs')}"]


class GradientPPO(PPO):
    """Declares, as a literal, that its workers do more than step: central inference is refused."""

    central_inference = False
    worker_duties = "compute curiosity bonuses"

    def __init__(self, config, **built):  # PPO's config (PPO.Config), the builder's arguments
        super().__init__(config, **built)


def problems_of(make_cfg, *overrides, check_env=False) -> list[str]:
    with pytest.raises(ConfigError) as err:
        validate_config(make_cfg(*overrides), check_env=check_env)
    return err.value.problems


def test_a_samplers_own_rule_is_reported_with_every_other_problem(make_cfg):
    problems = problems_of(make_cfg, f"parallel._target_={HERE}.PickySampler", "envs_per_worker=3", "seed=-1")
    assert problems == ["seed: -1 is out of range (must be >= 0)",
                        "envs_per_worker: PickySampler steps environments in pairs"]
    validate_config(make_cfg(f"parallel._target_={HERE}.PickySampler", "envs_per_worker=4"), check_env=False)


def test_a_user_algorithms_own_rule_is_asked(make_cfg):
    problems = problems_of(make_cfg, f"algo._target_={HERE}.PickyPPO", "algo.epochs=3", "algo.lr=-1")
    assert problems == ["algo.lr: -1 is out of range (must be > 0)", "algo.epochs: PickyPPO takes 1 epoch, got 3"]
    validate_config(make_cfg(f"algo._target_={HERE}.PickyPPO", "algo.epochs=1"), check_env=False)


def test_an_algorithms_declared_capability_decides_central_inference(make_cfg):
    overrides = ("parallel=multiprocess", "parallel.inference=central")
    validate_config(make_cfg(*overrides), check_env=False)  # PPO's workers only act and step
    problems = problems_of(make_cfg, *overrides, f"algo._target_={HERE}.GradientPPO")
    assert len(problems) == 1
    assert "workers do more (compute curiosity bonuses)" in problems[0]


@pytest.mark.parametrize("mode", ["local", "multiprocess", "distributed"])
def test_the_parallel_group_names_its_mode(make_cfg, mode):
    cfg = make_cfg(f"parallel={mode}")
    assert cfg.parallel.name == mode
    problems = problems_of(make_cfg, f"parallel={mode}", "ray.address=10.0.0.1:6379") if mode != "distributed" else []
    assert all(f"parallel={mode} " in p for p in problems)


class CountedEnv(gym.Env):
    """CartPole-sized, counting how many were built in this process."""

    built = 0
    observation_space = gym.spaces.Box(-1.0, 1.0, (4,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def __init__(self):
        CountedEnv.built += 1

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return np.zeros(4, np.float32), {}

    def step(self, action):
        return np.zeros(4, np.float32), 1.0, False, False, {}


def test_validations_environment_probe_serves_the_build(make_cfg):
    cfg = make_cfg(f"env.entry_point={HERE}:CountedEnv", "env.id=null", "env.vectorization=sync", "workers=1",
                   "envs_per_worker=1", "total_steps=64")
    CountedEnv.built = 0
    probe = validate_config(cfg)
    assert CountedEnv.built == 1 and probe.observation.obs_dim == 4 and probe.action.discrete
    trainer = build_trainer(cfg, env_probe=probe)
    trainer.close()
    assert CountedEnv.built == 2  # the sampler's one environment; no second probe
    CountedEnv.built = 0
    build_trainer(cfg).close()
    assert CountedEnv.built == 2  # without a probe the build makes its own


def import_edges(package: Path) -> dict[str, set[str]]:
    """Module -> rlpar modules it imports, lazy imports included, TYPE_CHECKING ones left out."""
    modules = {}
    for path in package.rglob("*.py"):
        name = ".".join(path.relative_to(package.parent).with_suffix("").parts)
        modules[name.removesuffix(".__init__")] = path

    def resolve(name: str) -> str | None:
        while name and name not in modules:
            name = name.rpartition(".")[0]
        return name or None

    edges = defaultdict(set)
    for module, path in modules.items():
        tree = ast.parse(path.read_text())
        typing_only = {id(n) for node in ast.walk(tree) if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)
                       for child in node.body for n in ast.walk(child)}
        here = module if path.name == "__init__.py" else module.rpartition(".")[0]
        for node in ast.walk(tree):
            if id(node) in typing_only:
                continue
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    parts = here.split(".")
                    base = ".".join(parts[: len(parts) - node.level + 1] + ([base] if base else []))
                names = [base] + [f"{base}.{a.name}" for a in node.names]
            else:
                continue
            for name in names:
                target = resolve(name) if name.startswith("rlpar") else None
                if target and target != module and target != "rlpar":
                    edges[module].add(target)
    return edges


def cycles(edges: dict[str, set[str]]) -> list[set[str]]:
    """Strongly connected components of more than one node."""
    nodes = set(edges) | {b for bs in edges.values() for b in bs}
    reach = {n: set() for n in nodes}
    for start in nodes:
        stack = list(edges.get(start, ()))
        while stack:
            node = stack.pop()
            if node not in reach[start]:
                reach[start].add(node)
                stack.extend(edges.get(node, ()))
    found = {frozenset({a} | {b for b in reach[a] if a in reach[b]}) for a in nodes if a in reach[a]}
    return [set(c) for c in found if len(c) > 1]


def package_of(module: str) -> str:
    """rlpar/config/x.py -> config; rlpar/cli.py -> cli; the package itself -> rlpar."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "rlpar"


def test_imports_point_down_with_no_circles():
    edges = import_edges(ROOT / "rlpar")
    assert cycles(edges) == []
    packages = defaultdict(set)
    for a, bs in edges.items():
        for b in bs:
            if package_of(a) != package_of(b) and "rlpar" not in (package_of(a), package_of(b)):
                packages[package_of(a)].add(package_of(b))
    assert cycles(packages) == []
    components = {"algos", "sampling", "learners", "replay", "search", "runtime", "learning", "models"}
    assert packages["config"] & components == set()


def test_the_scan_sees_a_circle():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [{"a", "b", "c"}]
