"""Self-play against an opponent pool (`env.opponent=pool`, a turn-based game's: docs/multi_agent.md).

The learner's side, `OpponentPool` (the algorithm holds it), snapshots the current weights every
`snapshot_every` updates, keeps the newest `size`, records each game's outcome against its
opponent and sets the probabilities with which a game's opponent is drawn: `self_fraction` the
current policy, `reference_fraction` the fixed references (`random`: uniform legal moves), the
rest the snapshots (`sampling`: the latest, uniform, or PFSP, prioritised by the learner's loss
rate against each). The pool rides to the workers inside the weights they are sent (under
`OPPONENT_POOL_KEY`, with a version; a worker process is sent each snapshot's weights once:
`without_held_snapshots`); a worker's `OpponentLineup` turns its snapshots into acting policies
when the version changes, and each game draws its opponent at reset with the
game's own seeded generator (rlpar.envs.pettingzoo.TurnBasedGame), so blocking runs repeat
exactly on every sampler.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from rlpar.selfplay.scripted import SCRIPTED_PLAYERS, scripted_player
from rlpar.typed_config import choice, integer, number

OPPONENT_POOL_KEY = "opponent_pool"  # the key of the weights sent to workers that carries the pool
SELF, RANDOM, SCRIPTED = "self", "random", "scripted"  # the current policy; uniform legal moves; the game's script
REFERENCES = (RANDOM, SCRIPTED)  # fixed opponents a pool may hold (scripted: where the game has a scripted player)
SAMPLINGS = ("latest", "uniform", "pfsp")
PFSP_FLOOR = 0.02  # a PFSP weight never below this: a snapshot beaten every time is still met now and then
SNAPSHOT_PREFIX = "v"  # a snapshot's label: v<policy version it was taken at>
NODE = "env.opponent_pool"


@dataclass(frozen=True, kw_only=True)
class OpponentPoolConfig:
    """The `env.opponent_pool` keys (conf/env/pettingzoo.yaml), read with `env.opponent=pool`."""

    snapshot_every: int = integer(5, low=1)  # learner updates between snapshots of the current weights
    size: int = integer(20, low=1)  # snapshots kept; the oldest is dropped
    sampling: str = choice("pfsp", SAMPLINGS)  # which snapshot a snapshot game meets
    self_fraction: float = number(0.5, low=0, high=1)  # share of games against the current policy
    reference_fraction: float = number(0.25, low=0, high=1)  # share against the references, split evenly
    references: tuple[str, ...] = field(
        default=(RANDOM,)
    )  # fixed opponents: random, and scripted where the game has one
    pfsp_exponent: float = number(2.0, low=0)  # a snapshot's weight: (1 - learner's score against it) ** this
    recent_games: int = integer(200, low=1)  # games per opponent that win rates and PFSP read

    @classmethod
    def config_problems(cls, config) -> list[str]:
        """The fractions share one game, and the references are known ones, random among them."""
        problems = []
        node = config.get(NODE)
        if not isinstance(node, dict):
            return [f"{NODE}: expected a mapping of its keys, got {node!r}"] if node is not None else []
        own, refs = node.get("self_fraction", cls.self_fraction), node.get("reference_fraction", cls.reference_fraction)
        if all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in (own, refs)) and own + refs > 1:
            problems.append(
                f"{NODE}: self_fraction ({own}) + reference_fraction ({refs}) is more than 1; the snapshots "
                "get the rest of the games"
            )
        references = node.get("references", list(cls.references))
        if not isinstance(references, (list, tuple)) or not all(isinstance(r, str) for r in references):
            problems.append(
                f"{NODE}.references: expected a list of names ({', '.join(REFERENCES)}), got {references!r}"
            )
        else:
            unknown = [r for r in references if r not in REFERENCES]
            if unknown:
                problems.append(
                    f"{NODE}.references: {', '.join(unknown)} {'is' if len(unknown) == 1 else 'are'} not one of "
                    f"{', '.join(REFERENCES)}"
                )
            game = config.get("env.entry_point") or config.get("env.id")
            if SCRIPTED in references and scripted_player(game) is None:
                problems.append(
                    f"{NODE}.references: {game} has no scripted player (the games that have one: "
                    f"{', '.join(SCRIPTED_PLAYERS)})"
                )
            if RANDOM not in references:
                problems.append(f"{NODE}.references: needs {RANDOM} (uniform legal moves), the rating's anchor")
        return problems


def pool_config(node: dict | None) -> OpponentPoolConfig:
    """The typed config of an `env.opponent_pool` node (validated already)."""
    node = dict(node or {})
    if "references" in node:
        node["references"] = tuple(node["references"])
    return OpponentPoolConfig(**node)


def snapshot_label(policy_version: int) -> str:
    return f"{SNAPSHOT_PREFIX}{policy_version}"


def game_score(outcomes) -> float:
    """The learner's mean score in `outcomes` (1 win, 0 draw, -1 loss) as 1, 1/2, 0, with one
    drawn game added, so an opponent not met yet scores 1/2."""
    outcomes = list(outcomes)
    return (sum((o + 1) / 2 for o in outcomes) + 0.5) / (len(outcomes) + 1)


class OpponentPool:
    """The learner's side of the pool (see the module docstring)."""

    def __init__(self, config: OpponentPoolConfig):
        self.config = config
        self.snapshots: list[tuple[str, dict]] = []  # (label, weights as numpy), oldest first
        self.last_snapshot: int | None = None  # the policy version of the newest snapshot
        self.version = 0  # of what workers are sent: changes with the snapshots or the probabilities
        self.recent: dict[str, deque] = {}  # opponent label -> the learner's recent outcomes against it
        self.recent_pool: deque = deque(maxlen=config.recent_games)  # against any snapshot
        self._sent: tuple | None = None  # (labels, probabilities) of `version`
        self._payload: dict | None = None

    # -- what workers are sent ----------------------------------------------------------------
    def riding_with(self, weights: dict, policy_version: int, policy_weights: Callable[[], dict]) -> dict:
        """`weights` for the workers with the pool beside them; a snapshot of `policy_weights()`
        taken first when `snapshot_every` updates have passed since the last one (or none yet)."""
        due = self.last_snapshot is None or policy_version - self.last_snapshot >= self.config.snapshot_every
        if due:
            snapshot = {k: np.array(v, copy=True) for k, v in policy_weights().items()}
            self.snapshots = [*self.snapshots, (snapshot_label(policy_version), snapshot)][-self.config.size :]
            self.last_snapshot = policy_version
            kept = {label for label, _ in self.snapshots}
            self.recent = {
                label: games
                for label, games in self.recent.items()
                if label in kept or not label.startswith(SNAPSHOT_PREFIX)
            }
        return {**weights, OPPONENT_POOL_KEY: self.payload()}

    def payload(self) -> dict:
        """The pool as workers take it: labels, probabilities, snapshot weights and a version
        that changes whenever any of them does."""
        labels, probabilities = self.probabilities()
        sent = (labels, tuple(probabilities.tolist()))
        if sent != self._sent or self._payload is None:
            self.version += 1
            self._sent, self._payload = sent, self._packed(labels, probabilities)
        return self._payload

    def _packed(self, labels, probabilities) -> dict:
        return {
            "version": self.version,
            "labels": list(labels),
            "probabilities": probabilities,
            "snapshots": dict(self.snapshots),
        }

    def probabilities(self) -> tuple[tuple[str, ...], np.ndarray]:
        """Every opponent a game may meet and the chance it does: the current policy, the
        references, the snapshots (their share goes to the current policy while there are none)."""
        c = self.config
        snapshot_share = 1.0 - c.self_fraction - c.reference_fraction
        own = c.self_fraction + (snapshot_share if not self.snapshots else 0.0)
        labels = (SELF, *c.references, *(label for label, _ in self.snapshots))
        shares = [own] + [c.reference_fraction / len(c.references)] * len(c.references)
        shares += (snapshot_share * self.snapshot_weights()).tolist() if self.snapshots else []
        probabilities = np.maximum(np.asarray(shares, np.float64), 0.0)
        return labels, probabilities / probabilities.sum()

    def snapshot_weights(self) -> np.ndarray:
        """How the snapshots' share is split between them (summing to 1): all to the newest
        (`latest`), evenly (`uniform`), or PFSP: (1 - the learner's recent score against each)
        ** pfsp_exponent, at least PFSP_FLOOR, so the snapshots it still loses to come most."""
        count, sampling = len(self.snapshots), self.config.sampling
        if sampling == "latest":
            weights = np.zeros(count)
            weights[-1] = 1.0
        elif sampling == "uniform":
            weights = np.ones(count)
        else:
            scores = np.array([game_score(self.recent.get(label, ())) for label, _ in self.snapshots])
            weights = np.maximum((1.0 - scores) ** self.config.pfsp_exponent, PFSP_FLOOR)
        return weights / weights.sum()

    # -- what games come back -----------------------------------------------------------------
    def take_in(self, game_results) -> dict:
        """Record a batch's finished games ((step, column, opponent, outcome, moved first), in
        the batch's order) and return the iteration's metrics: win rates over the recent games
        against the references, the snapshots (`pool`) and the current policy; this iteration's
        games per opponent, [won, drawn, lost] (what `rlpar report` rates)."""
        counts: dict[str, list[int]] = {}
        for _, _, opponent, outcome, _ in game_results:
            outcome = int(outcome)
            self.recent.setdefault(opponent, deque(maxlen=self.config.recent_games)).append(outcome)
            if opponent.startswith(SNAPSHOT_PREFIX):
                self.recent_pool.append(outcome)
            tally = counts.setdefault(opponent, [0, 0, 0])
            tally[1 - outcome] += 1  # won, drawn, lost
        metrics: dict = {}
        for name, games in [
            (SELF, self.recent.get(SELF, ())),
            *((ref, self.recent.get(ref, ())) for ref in self.config.references),
            ("pool", self.recent_pool),
        ]:
            if games:
                metrics[f"win_rate_vs_{name}"] = sum(o == 1 for o in games) / len(games)
                metrics[f"loss_rate_vs_{name}"] = sum(o == -1 for o in games) / len(games)
        metrics["games_by_opponent"] = counts
        metrics["pool_size"] = len(self.snapshots)
        metrics["pool_latest"] = self.snapshots[-1][0] if self.snapshots else None
        return metrics

    # -- checkpoints --------------------------------------------------------------------------
    def state_dict(self) -> dict:
        """Tensors and plain values (checkpoints load with weights_only)."""
        import torch

        return {
            "snapshots": [
                {"label": label, "weights": {k: torch.from_numpy(np.array(v)) for k, v in weights.items()}}
                for label, weights in self.snapshots
            ],
            "last_snapshot": self.last_snapshot,
            "version": self.version,
            "recent": {label: list(games) for label, games in self.recent.items()},
            "recent_pool": list(self.recent_pool),
            "sent": None
            if self._sent is None
            else {"labels": list(self._sent[0]), "probabilities": list(self._sent[1])},
        }

    def load_state_dict(self, state: dict) -> None:
        self.snapshots = [
            (entry["label"], {k: v.numpy().copy() for k, v in entry["weights"].items()}) for entry in state["snapshots"]
        ]
        self.last_snapshot = state["last_snapshot"]
        self.recent = {label: deque(games, maxlen=self.config.recent_games) for label, games in state["recent"].items()}
        self.recent_pool = deque(state["recent_pool"], maxlen=self.config.recent_games)
        self.version = int(state["version"])
        if state.get("sent") is not None:  # what workers were sent last: the next change makes the next version
            labels, probabilities = tuple(state["sent"]["labels"]), tuple(state["sent"]["probabilities"])
            self._sent = (labels, probabilities)
            self._payload = self._packed(labels, np.asarray(probabilities, np.float64))


def without_held_snapshots(weights: dict, held: frozenset) -> tuple[dict, frozenset]:
    """`weights` for a worker that holds the snapshots labelled `held` already: the pool with only
    the other snapshots' weights (a snapshot's weights travel to each worker once), and the
    labels that worker holds once it has taken them."""
    pool = weights.get(OPPONENT_POOL_KEY)
    if pool is None:
        return weights, held
    news = {label: w for label, w in pool["snapshots"].items() if label not in held}
    return {**weights, OPPONENT_POOL_KEY: {**pool, "snapshots": news}}, frozenset(pool["snapshots"])


def snapshots_carried(weights: dict) -> tuple[str, ...]:
    """The labels of the snapshots whose weights `weights` carries (none without a pool)."""
    pool = weights.get(OPPONENT_POOL_KEY)
    return () if pool is None else tuple(pool["snapshots"])


class OpponentLineup:
    """A worker's side of the pool: the opponents its games draw from, the snapshots as acting
    policies (`make_policy()` builds an empty one), rebuilt only when the pool's version changes."""

    def __init__(self, make_policy: Callable[[], object]):
        self.make_policy = make_policy
        self.version: int | None = None
        self.labels: tuple[str, ...] = ()
        self.cumulative = np.ones(0)
        self.policies: dict[str, object] = {}

    def update(self, payload: dict) -> None:
        """Take a pool: its snapshots' weights are those this lineup lacks (a snapshot's weights
        never change, so one it holds is kept while the pool lists it)."""
        if payload["version"] == self.version:
            return
        policies = {label: self.policies[label] for label in payload["labels"] if label in self.policies}
        for label, weights in payload["snapshots"].items():
            if label not in policies:
                policies[label] = policy = self.make_policy()
                policy.set_weights(weights)  # type: ignore[attr-defined]
        self.policies = policies
        self.labels = tuple(payload["labels"])
        self.cumulative = np.cumsum(np.asarray(payload["probabilities"], np.float64))
        self.version = payload["version"]

    def draw(self, rng: np.random.Generator) -> str:
        """A game's opponent, drawn with `rng` (the game's own generator)."""
        index = int(np.searchsorted(self.cumulative, rng.random() * self.cumulative[-1], side="right"))
        return self.labels[min(index, len(self.labels) - 1)]

    def policy(self, label: str):
        """Snapshot `label`'s acting policy; None where the pool holds no such snapshot."""
        return self.policies.get(label)

    def newest(self) -> str | None:
        """The label of the newest snapshot held (None: none yet)."""
        versions = [int(label[len(SNAPSHOT_PREFIX) :]) for label in self.policies]
        return snapshot_label(max(versions)) if versions else None
