"""`experiment=benchmark`'s rows: one table, conf/benchmark/rows.csv (docs/benchmark_table.md).

Each line of the table is one (algorithm, environment) row: its sub-table (classic, box2d, mujoco
or atari), the algo option, the environment id, the parallel mode and workers, the reference's
budget (`total_steps`), and overrides of its own, if any (`algo.lr=5.0e-3`, separated by spaces).
The table's order is the order of `benchmark=all`.

`register()` (when `rlpar.config` is imported) makes each row an option of the `benchmark_row`
config group, named `<algo>-<env id>` with a `/` of the id written `_` (Hydra reads a `/` in an
option as a folder of the group: `ppo-ALE_Pong-v5` is the row of `ALE/Pong-v5`), in Hydra's
ConfigStore: `+benchmark_row=ppo-CartPole-v1` composes it like the `@package _global_` file it
stands for, `--cfg job` prints what it runs, and `+benchmark_row=a,b` sweeps over rows. The row

    classic,apex,CartPole-v1,distributed,4,50000,algo.replay_ratio=1.0

composes as

    defaults: [{override /algo: apex}, {override /parallel: distributed}]
    env: {id: CartPole-v1}
    workers: 4
    total_steps: 50000
    algo: {replay_ratio: 1.0}

The env groups of conf/env differ only by id, except where an id's namespace needs its own:
`ENV_GROUPS` maps a namespace (the part of the id before `/`) to the env option its rows add to
their defaults, `ALE/` to `env=atari` (ale-py, frame skip and stacking, no sticky actions); ids
without a listed namespace keep the default env group. The row

    atari,impala,ALE/Pong-v5,distributed,4,2500000,

composes as

    defaults: [{override /algo: impala}, {override /parallel: distributed}, {override /env: atari}]
    env: {id: ALE/Pong-v5}
    workers: 4
    total_steps: 2500000

It also registers the resolver `${rlpar.benchmark_rows:<sub-table>}`: the names of a sub-table's
rows (`all`: every row), which conf/benchmark/<sub-table>.yaml sweeps over.
"""

from __future__ import annotations

import csv
import functools
from typing import cast

from rlpar.config.conf_dir import CONF_DIR

TABLE = CONF_DIR / "benchmark" / "rows.csv"
GROUP = "benchmark_row"
COLUMNS = ("table", "algo", "env", "parallel", "workers", "total_steps", "overrides")
ALL = "all"  # benchmark=all: every row, in the table's order
RESOLVER = "rlpar.benchmark_rows"
ENV_GROUPS = {"ALE": "atari"}  # an env id's namespace -> the conf/env option its rows compose


def row_name(row: dict) -> str:
    """`<algo>-<env id>`, a `/` of the id as `_`: Hydra would read it as a folder of the group."""
    return f"{row['algo']}-{row['env'].replace('/', '_')}"


def env_group(env_id: str) -> str | None:
    """The conf/env option an env id's rows need (`ENV_GROUPS`, by its namespace), or None: the default's."""
    namespace, slash, _ = env_id.partition("/")
    return ENV_GROUPS.get(namespace) if slash else None


@functools.cache
def rows() -> dict[str, dict]:
    """The table's rows by name, in its order; each with its columns (`workers` and `total_steps`
    as integers, `overrides` as a list of `key=value`)."""
    with open(TABLE, newline="") as handle:
        reader = csv.DictReader(handle)
        if tuple(reader.fieldnames or ()) != COLUMNS:
            raise ValueError(f"{TABLE}: the columns are {', '.join(COLUMNS)}, not {', '.join(reader.fieldnames or ())}")
        found = {}
        for line, row in enumerate(reader, start=2):
            if None in row or any(row[column] in (None, "") for column in COLUMNS[:-1]):
                raise ValueError(f"{TABLE}, line {line}: every column but overrides needs a value")
            row = {
                **row,
                "workers": int(row["workers"]),
                "total_steps": int(row["total_steps"]),
                "overrides": row["overrides"].split(),
            }
            if row_name(row) in found:
                raise ValueError(f"{TABLE}, line {line}: row {row_name(row)} is there twice")
            found[row_name(row)] = row
    return found


def row_config(row: dict) -> dict:
    """What the row composes: its algorithm, parallel mode and, where its id's namespace needs one,
    env group (group overrides), env.id, workers, total_steps and its own overrides."""
    from omegaconf import OmegaConf

    base = OmegaConf.create({"env": {"id": row["env"]}, "workers": row["workers"], "total_steps": row["total_steps"]})
    config = OmegaConf.merge(base, OmegaConf.from_dotlist(row["overrides"]))
    defaults = [{"override /algo": row["algo"]}, {"override /parallel": row["parallel"]}]
    if (group := env_group(row["env"])) is not None:
        defaults.append({"override /env": group})
    return {
        "defaults": defaults,
        **cast(dict, OmegaConf.to_container(config)),
    }


def row_names(table: str) -> str:
    """`table`'s row names, comma-separated: a sweep of `+benchmark_row` over them."""
    tables = list(dict.fromkeys(row["table"] for row in rows().values()))
    if table != ALL and table not in tables:
        raise ValueError(f"no benchmark table '{table}' in {TABLE.name} (one of: {ALL}, {', '.join(tables)})")
    return ",".join(name for name, row in rows().items() if table in (ALL, row["table"]))


_registered = False


def register() -> None:
    """The rows as `benchmark_row` options, and the resolver; once per process."""
    global _registered
    if _registered:
        return
    from hydra.core.config_store import ConfigStore
    from omegaconf import OmegaConf

    store = ConfigStore.instance()
    for name, row in rows().items():
        store.store(group=GROUP, name=name, node=row_config(row), package="_global_")
    if not OmegaConf.has_resolver(RESOLVER):
        OmegaConf.register_new_resolver(RESOLVER, row_names)
    _registered = True
