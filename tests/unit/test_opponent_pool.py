"""Self-play against an opponent pool (`env.opponent=pool`, rlpar.selfplay.pool) on PettingZoo's
tictactoe: snapshot cadence and size, the latest/uniform/PFSP probabilities, games drawing their
opponent from the lineup with their own generator, the win rates logged per iteration, identical
runs on the local and multiprocess samplers, an exact resume through a checkpoint, validation in
one message, `rlpar report`'s rating table, and the scripted tictactoe reference."""

import json

import numpy as np
import pytest

from rlpar.config.validate import ConfigError, validate_config
from rlpar.envs.factory import make_env, resolve_env_spec
from rlpar.models.spec import PolicySpec
from rlpar.report import write_report
from rlpar.runtime.build import build_trainer, probe_policy_spec
from rlpar.sampling.rollout import RolloutWorker
from rlpar.selfplay.pool import (
    OPPONENT_POOL_KEY,
    PFSP_FLOOR,
    OpponentLineup,
    OpponentPool,
    OpponentPoolConfig,
    without_held_snapshots,
)
from rlpar.selfplay.ratings import fit_ratings, rated_games
from rlpar.selfplay.scripted import scripted_player, tictactoe_move

TICTACTOE = "pettingzoo.classic.tictactoe_v3"
GAME = ("env=pettingzoo", f"env.id={TICTACTOE}", "algo=ppo")
SMALL = (
    *GAME,
    "envs_per_worker=4",
    "algo.rollout_length=32",
    "algo.epochs=1",
    "algo.minibatch_size=64",
    "model.hidden_sizes=[16]",
    "env.opponent_pool.snapshot_every=2",
    "env.opponent_pool.size=3",
    "checkpoint.every=0",
)


def weights_of(version: int) -> dict:
    return {"w": np.full(2, float(version))}


def pool_after(config: OpponentPoolConfig, versions) -> OpponentPool:
    pool = OpponentPool(config)
    for version in versions:
        pool.riding_with({}, version, lambda version=version: weights_of(version))
    return pool


def test_snapshots_every_k_updates_keep_the_newest_and_ride_with_the_weights():
    pool = OpponentPool(OpponentPoolConfig(snapshot_every=3, size=2))
    sent = [pool.riding_with({"w": 1}, version, lambda v=version: weights_of(v)) for version in range(8)]
    assert [label for label, _ in pool.snapshots] == ["v3", "v6"]  # taken at 0, 3 and 6; v0 dropped
    assert pool.snapshots[-1][1]["w"][0] == 6.0
    assert all(s["w"] == 1 and set(s[OPPONENT_POOL_KEY]["snapshots"]) <= {"v0", "v3", "v6"} for s in sent)
    versions = [s[OPPONENT_POOL_KEY]["version"] for s in sent]
    assert versions == sorted(versions) and len(set(versions)) == 3  # a new version with each change only


def test_probabilities_of_latest_uniform_and_pfsp():
    fractions = {"self_fraction": 0.5, "reference_fraction": 0.2, "snapshot_every": 1, "size": 3}
    labels, p = pool_after(OpponentPoolConfig(**fractions, sampling="latest"), range(3)).probabilities()
    assert labels == ("self", "random", "v0", "v1", "v2")
    np.testing.assert_allclose(p, [0.5, 0.2, 0.0, 0.0, 0.3])
    _, p = pool_after(OpponentPoolConfig(**fractions, sampling="uniform"), range(3)).probabilities()
    np.testing.assert_allclose(p, [0.5, 0.2, 0.1, 0.1, 0.1])
    _, p = OpponentPool(OpponentPoolConfig(**fractions)).probabilities()  # no snapshot yet: their share to self
    np.testing.assert_allclose(p, [0.8, 0.2])

    pfsp = pool_after(OpponentPoolConfig(**fractions, sampling="pfsp", pfsp_exponent=2.0), range(3))
    results = [(0, 0, "v0", 1, True)] * 9 + [(0, 0, "v1", -1, True)] * 9 + [(0, 0, "v2", 0, True)] * 9
    pfsp.take_in(results)
    _, p = pfsp.probabilities()
    scores = np.array([9.5 / 10, 0.5 / 10, 5 / 10])  # wins and half the draws, plus one virtual draw
    weights = np.maximum((1 - scores) ** 2, PFSP_FLOOR)
    np.testing.assert_allclose(p[2:], 0.3 * weights / weights.sum())
    assert p[3] > p[4] > p[2]  # the snapshot it loses to most, then the one it draws with


def test_validation_names_every_problem_of_the_pool_in_one_message(make_cfg):
    bad = (
        "env.opponent_pool.snapshot_every=0",
        "env.opponent_pool.sampling=best",
        "env.opponent_pool.self_fraction=0.9",
        "env.opponent_pool.reference_fraction=0.3",
        "env.opponent_pool.references=[random,minimax]",
        "+env.opponent_pool.sise=3",
    )
    with pytest.raises(ConfigError) as raised:
        validate_config(make_cfg(*GAME, *bad), check_env=False)
    problems = "\n".join(raised.value.problems)
    for words in (
        "env.opponent_pool.snapshot_every: 0",
        "env.opponent_pool.sampling: 'best' is not one of latest, uniform, pfsp",
        "self_fraction (0.9) + reference_fraction (0.3) is more than 1",
        "env.opponent_pool.references: minimax is not one of random",
        "env.opponent_pool.sise: unknown key",
        "did you mean env.opponent_pool.size?",
    ):
        assert words in problems, problems
    with pytest.raises(ConfigError, match="needs random"):
        validate_config(make_cfg(*GAME, "env.opponent_pool.references=[]"), check_env=False)
    validate_config(make_cfg(*GAME), check_env=False)  # the defaults pass


def opponents_met(env, games: int) -> list[str]:
    """The opponent of each of `games` games from `reset(seed=3)`, the learner taking its first
    legal move every turn; closes `env`."""
    met = []
    obs, _ = env.reset(seed=3)
    for _ in range(games):
        done = False
        while not done:
            obs, _, done, _, info = env.step(int(np.flatnonzero(obs["action_mask"])[0]))
        met.append(info["opponent"])
        obs, _ = env.reset()
    env.close()
    return met


def test_each_game_draws_its_opponent_from_the_lineup_with_its_own_generator():
    spec = resolve_env_spec(kind="pettingzoo", id=TICTACTOE, opponent="pool")
    policy_spec, _ = probe_policy_spec(spec, PolicySpec)
    weights = {k: v.detach().numpy() for k, v in policy_spec.build().state_dict().items()}
    pool = OpponentPool(OpponentPoolConfig(self_fraction=0.4, reference_fraction=0.3, sampling="uniform"))
    payload = pool.riding_with({}, 0, lambda: weights)[OPPONENT_POOL_KEY]
    met = []
    for _ in range(2):
        lineup = OpponentLineup(policy_spec.acting_policy)
        lineup.update(payload)
        env = make_env(spec)
        env.unwrapped.set_opponent_lineup(lineup)
        own = policy_spec.acting_policy()
        own.set_weights(weights)
        env.unwrapped.set_opponent_policy(own)
        met.append(opponents_met(env, 300))
    assert met[0] == met[1]  # seeded: the same opponents in the same order
    shares = {who: met[0].count(who) / len(met[0]) for who in ("self", "random", "v0")}
    assert shares == pytest.approx({"self": 0.4, "random": 0.3, "v0": 0.3}, abs=0.08)


def test_a_game_without_the_current_policy_plays_self_draws_against_the_newest_snapshot(make_cfg):
    """A worker under central inference holds no acting copy of the current policy: the pool's
    `self` draws are played by its newest snapshot, never by random moves labelled self; and
    env.opponent=self is refused there in one line."""
    spec = resolve_env_spec(kind="pettingzoo", id=TICTACTOE, opponent="pool")
    policy_spec, _ = probe_policy_spec(spec, PolicySpec)
    weights = {k: v.detach().numpy() for k, v in policy_spec.build().state_dict().items()}
    pool = OpponentPool(OpponentPoolConfig(self_fraction=0.5, reference_fraction=0.25, sampling="uniform"))
    for version in (0, 5, 10):
        payload = pool.riding_with({}, version, lambda: weights)[OPPONENT_POOL_KEY]
    lineup = OpponentLineup(policy_spec.acting_policy)
    lineup.update(payload)
    assert lineup.newest() == "v10" and OpponentLineup(policy_spec.acting_policy).newest() is None
    env = make_env(spec)
    env.unwrapped.set_opponent_lineup(lineup)  # and no set_opponent_policy: the central inference worker's case
    met = opponents_met(env, 200)
    assert "self" not in met
    assert met.count("v10") / len(met) == pytest.approx(0.5 + 0.25 / 3, abs=0.08)  # self's share and its own
    central = ("parallel=distributed", "parallel.inference=central")
    with pytest.raises(ConfigError, match="env.opponent=self: the self opponent moves on the rollout workers"):
        validate_config(make_cfg(*GAME, "env.opponent=self", *central), check_env=False)
    validate_config(make_cfg(*GAME, "env.opponent=self", "parallel.inference=central"), check_env=False)  # local
    validate_config(make_cfg(*GAME, *central), check_env=False)  # the pool


def test_a_worker_builds_the_lineup_once_per_pool_version_and_returns_the_games():
    spec = resolve_env_spec(kind="pettingzoo", id=TICTACTOE, opponent="pool")
    policy_spec, _ = probe_policy_spec(spec, PolicySpec)
    weights = {k: v.detach().numpy() for k, v in policy_spec.build().state_dict().items()}
    pool = OpponentPool(OpponentPoolConfig(self_fraction=0.0, reference_fraction=0.5, sampling="latest"))
    worker = RolloutWorker(env_spec=spec, policy_spec=policy_spec, num_envs=2, rollout_length=64, seed=0)
    try:
        worker.set_weights(pool.riding_with(weights, 0, lambda: weights), version=0)
        lineup = worker.opponent_lineup
        snapshot = lineup.policy("v0")
        batch = worker.sample()
        worker.set_weights(pool.riding_with(weights, 1, lambda: weights), version=1)  # the same pool
        assert worker.opponent_lineup is lineup and lineup.policy("v0") is snapshot
        assert all(env.unwrapped._lineup is lineup for env in worker.venv.envs)
        # a worker process is sent each snapshot's weights once: v5's here, not v0's again
        sent, held = without_held_snapshots(pool.riding_with(weights, 5, lambda: weights), frozenset({"v0"}))
        assert set(sent[OPPONENT_POOL_KEY]["snapshots"]) == {"v5"} and held == {"v0", "v5"}
        worker.set_weights(sent, version=5)
        assert lineup.policy("v0") is snapshot and lineup.policy("v5") not in (None, snapshot)
    finally:
        worker.close()
    met = [g[2] for g in batch.game_results]
    assert set(met) == {"self", "random", "v0"} and met.count("self") <= 2  # reset before the pool came: self
    ends = {(t, c) for t, c in batch.episode_ends}
    assert all((t, c) in ends and outcome in (-1, 0, 1) for t, c, _, outcome, _ in batch.game_results)


def rows_of(trainer, iterations: int) -> list[dict]:
    keep = ("env_steps", "loss_policy", "loss_value", "games_by_opponent", "pool_size", "pool_latest")
    rows = []
    for _ in range(iterations):
        metrics = trainer.train()
        rows.append({k: metrics.get(k) for k in keep} | {k: v for k, v in metrics.items() if "_rate_vs_" in k})
    return rows


def test_win_rates_are_logged_and_the_report_rates_the_pool(make_cfg, tmp_path):
    run_dir = tmp_path / "run"
    trainer = build_trainer(make_cfg(*SMALL, "total_steps=1024", run_dir=run_dir))  # 8 iterations
    try:
        trainer.fit()
    finally:
        trainer.close()
    logged = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    last = logged[-1]
    for key in ("win_rate_vs_random", "win_rate_vs_pool", "win_rate_vs_self", "loss_rate_vs_random"):
        assert 0.0 <= last[key] <= 1.0, key
    assert last["pool_size"] == 3 and last["pool_latest"] == "v6"  # snapshots at updates 0, 2, 4, 6: v0 dropped
    assert set(last["games_by_opponent"]) <= {"self", "random", "v2", "v4", "v6"}
    assert len(logged) == 8 and sum(sum(t) for t in last["games_by_opponent"].values()) == last["episodes_this_iter"]

    games = rated_games(logged)
    assert ("current", "random") in games and not any("self" in pair for pair in games)
    report = write_report(run_dir).read_text()
    assert "## Ratings (self-play runs)" in report and "| random | 1000 |" in report and "| current |" in report


def test_ratings_fit_known_odds():
    """A player that scores 3 of 4 against random rates about 400 log10(3) = 191 above it."""
    ratings = fit_ratings({("a", "random"): [3000, 0, 1000], ("b", "a"): [500, 1000, 500]})
    assert ratings["random"] == 1000
    assert ratings["a"] == pytest.approx(1000 + 400 * np.log10(3), abs=2)
    assert ratings["b"] == pytest.approx(ratings["a"], abs=3)  # as many wins as losses against a


def test_identical_runs_local_again_and_multiprocess(make_cfg, tmp_path):
    """Blocking: the same games against the same opponents, the same losses, iteration after
    iteration, run to run and on another sampler."""
    rows = {}
    layouts = (("local", ("workers=2",)), ("again", ("workers=2",)), ("mp", ("parallel=multiprocess", "workers=2")))
    for name, overrides in layouts:
        trainer = build_trainer(make_cfg(*SMALL, *overrides, run_dir=tmp_path / name))
        try:
            rows[name] = rows_of(trainer, 6)
        finally:
            trainer.close()
    assert rows["local"] == rows["again"] == rows["mp"]
    assert any(set(r["games_by_opponent"]) & {"v0", "v2", "v4"} for r in rows["local"])


def test_resume_continues_exactly_with_the_pool(make_cfg, tmp_path):
    trainer = build_trainer(make_cfg(*SMALL, run_dir=tmp_path / "a"))
    try:
        rows_of(trainer, 5)
        path = trainer.save()
        saved_pool = trainer.opponent_pool.state_dict()
        after = rows_of(trainer, 4)
    finally:
        trainer.close()
    resumed = build_trainer(make_cfg(*SMALL, "seed=7", run_dir=tmp_path / "b"))
    try:
        resumed.restore(path)
        pool = resumed.opponent_pool
        assert [label for label, _ in pool.snapshots] == [entry["label"] for entry in saved_pool["snapshots"]]
        assert pool.recent == {k: type(pool.recent[k])(v) for k, v in saved_pool["recent"].items()}
        again = rows_of(resumed, 4)
    finally:
        resumed.close()
    assert again == after


@pytest.mark.parametrize("algo", ["a3c", "dqn"])
def test_workers_of_other_algorithms_play_the_pool(make_cfg, tmp_path, algo):
    """A3C's gradient workers (weights from a parameter server) and DQN's ε-greedy ones take the
    pool that rides with what they are sent, and meet its snapshots."""
    overrides = ("env=pettingzoo", f"env.id={TICTACTOE}", f"algo={algo}", "model.hidden_sizes=[16]")
    overrides += ("env.opponent_pool.snapshot_every=1", "checkpoint.every=0")
    trainer = build_trainer(make_cfg(*overrides, run_dir=tmp_path / algo))
    try:
        rows = [trainer.train() for _ in range(6)]
    finally:
        trainer.close()
    met = {opponent for row in rows for opponent in row["games_by_opponent"]}
    assert {"self", "random"} < met and any(m.startswith("v") for m in met), met


def test_the_scripted_tictactoe_player_wins_then_blocks_and_beats_random_moves():
    board = np.zeros((3, 3, 2), np.int8)
    mine, theirs = board[..., 0].reshape(-1), board[..., 1].reshape(-1)  # views, square by action
    mine[[0, 1]], theirs[[3, 4]] = 1, 1  # it can complete 0-1-2; the opponent threatens 3-4-5
    mask = (mine + theirs == 0).astype(np.int8)
    rng = np.random.default_rng(0)
    assert tictactoe_move({"observation": board, "action_mask": mask}, rng) == 2  # a win before a block
    mine[1], theirs[1] = 0, 1  # no win of its own now; 3-4-5 still threatened (1 taken by the opponent)
    mask = (mine + theirs == 0).astype(np.int8)
    assert tictactoe_move({"observation": board, "action_mask": mask}, rng) == 5
    assert scripted_player(TICTACTOE) is tictactoe_move and scripted_player("pettingzoo.classic.go_v5") is None

    lost = {}
    for opponent in ("random", "scripted"):
        env, moves = make_env(resolve_env_spec(kind="pettingzoo", id=TICTACTOE, opponent=opponent)), rng
        outcomes = []
        obs, _ = env.reset(seed=0)
        for _ in range(200):
            done = False
            while not done:
                obs, _, done, _, info = env.step(int(moves.choice(np.flatnonzero(obs["action_mask"]))))
            outcomes.append(info["game_outcome"])
            obs, _ = env.reset()
        env.close()
        lost[opponent] = outcomes.count(-1) / len(outcomes)
    assert lost["scripted"] > lost["random"] + 0.25, lost


def test_a_pool_may_hold_the_scripted_reference_where_the_game_has_one(make_cfg):
    pool = OpponentPool(OpponentPoolConfig(references=("random", "scripted"), reference_fraction=0.3))
    labels, p = pool.probabilities()
    assert labels == ("self", "random", "scripted")
    np.testing.assert_allclose(p, [0.7, 0.15, 0.15])
    with_scripted = "env.opponent_pool.references=[random,scripted]"
    validate_config(make_cfg(*GAME, with_scripted), check_env=False)
    connect_four = ("env=pettingzoo", "env.id=pettingzoo.classic.connect_four_v3", "algo=ppo", with_scripted)
    with pytest.raises(ConfigError, match="connect_four_v3 has no scripted player"):
        validate_config(make_cfg(*connect_four), check_env=False)
