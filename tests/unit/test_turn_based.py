"""Turn-based PettingZoo games (tictactoe_v3, connect_four_v3) played as single-agent envs
(rlpar.envs.pettingzoo.TurnBasedGame): the learner's seat gets every reward its seat received,
the final one after the opponent's winning move included; seats alternate; masked play sends no
illegal move; a rollout worker hands its policy to the `self` opponent; configs route the game
to single-agent algorithms, and `rlpar evaluate --opponent` reports win, draw and loss rates."""

import json
import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from rlpar.config.validate import ConfigError, validate_config
from rlpar.envs.factory import TURN_BASED_ENTRY_POINT, make_env, resolve_env_spec
from rlpar.models.spec import PolicySpec
from rlpar.runtime.build import probe_policy_spec
from rlpar.sampling.rollout import RolloutWorker

ROOT = Path(__file__).resolve().parents[2]
TICTACTOE = "pettingzoo.classic.tictactoe_v3"
CONNECT_FOUR = "pettingzoo.classic.connect_four_v3"


def game(env_id=TICTACTOE, opponent="random"):
    return make_env(resolve_env_spec(kind="pettingzoo", id=env_id, opponent=opponent))


def random_legal(rng, obs) -> int:
    return int(rng.choice(np.flatnonzero(obs["action_mask"])))


def play(env, rng, seed=None):
    """One game with random legal moves: (rewards per learner step, the final info)."""
    obs, _ = env.reset(seed=seed)
    rewards, done, info = [], False, {}
    while not done:
        obs, reward, done, truncated, info = env.step(random_legal(rng, obs))
        assert not truncated
        rewards.append(reward)
    return rewards, info


def tictactoe_winner(env) -> int | None:
    """The seat index whose three in a row the board shows (None: a draw), read from the board."""
    board = np.asarray(env.unwrapped.game.unwrapped.board.squares).reshape(3, 3).T  # column-major squares
    lines = [*board, *board.T, board.diagonal(), np.fliplr(board).diagonal()]
    for line in lines:
        if line[0] != 0 and (line == line[0]).all():
            return int(line[0]) - 1  # squares hold 1 for the first seat, 2 for the second
    return None


def test_a_turn_based_game_is_routed_to_a_single_agent_env():
    spec = resolve_env_spec(kind="pettingzoo", id=TICTACTOE, opponent="random")
    assert spec.kind == "gymnasium" and spec.entry_point == TURN_BASED_ENTRY_POINT and spec.id == TICTACTOE
    assert resolve_env_spec(kind="pettingzoo", id="pettingzoo.butterfly.pistonball_v6").kind == "pettingzoo"


def test_the_learner_gets_its_seats_rewards_including_the_opponents_winning_move():
    env, rng = game(), np.random.default_rng(0)
    seen = {"win": 0, "loss": 0, "draw": 0}
    try:
        for episode in range(300):
            rewards, info = play(env, rng, seed=episode)
            learner = env.unwrapped.seats.index(env.unwrapped.learner)
            winner = tictactoe_winner(env)
            expected = 0 if winner is None else (1 if winner == learner else -1)
            assert sum(rewards) == expected and info["game_outcome"] == expected
            assert all(r == 0 for r in rewards[:-1])  # the game's only reward, at its end: a loss's
            seen[{1: "win", 0: "draw", -1: "loss"}[expected]] += 1  # after the opponent's winning move
    finally:
        env.close()
    assert min(seen.values()) >= 20, seen


def test_seats_alternate_and_seeded_games_repeat():
    env, again = game(), game()
    try:
        firsts = []
        env.reset(seed=5)
        for _ in range(6):
            firsts.append(env.unwrapped.learner == env.unwrapped.seats[0])
            env.reset()
        assert firsts == [firsts[0], not firsts[0]] * 3
        one = [play(env, np.random.default_rng(1), seed=s) for s in range(20)]
        two = [play(again, np.random.default_rng(1), seed=s) for s in range(20)]
        assert one == two
        assert {info["moved_first"] for _, info in one} == {True, False}
    finally:
        env.close()
        again.close()


@pytest.mark.parametrize("env_id", [TICTACTOE, CONNECT_FOUR])
def test_masked_play_sends_no_illegal_move(env_id, recwarn):
    env, rng = game(env_id), np.random.default_rng(2)
    steps, outcomes = 0, set()
    try:
        while steps < 3000:
            rewards, info = play(env, rng)
            steps += len(rewards)
            assert info["illegal_actions"] == 0 and sum(rewards) == info["game_outcome"]
            outcomes.add(info["game_outcome"])
        if env_id == TICTACTOE:  # one sent anyway is counted (the game ends it as the sender's loss)
            obs, _ = env.reset()
            if obs["action_mask"].all():  # the learner moves first: an occupied square after its move
                obs, *_ = env.step(random_legal(rng, obs))
            *_, done, _, info = env.step(int(np.flatnonzero(obs["action_mask"] == 0)[0]))
            assert done and info["illegal_actions"] == 1 and info["game_outcome"] == -1
    finally:
        env.close()
    assert {1, -1} <= outcomes


def test_a_worker_hands_its_policy_to_the_self_opponent():
    spec = resolve_env_spec(kind="pettingzoo", id=TICTACTOE, opponent="self")
    policy_spec, _ = probe_policy_spec(spec, PolicySpec)
    worker = RolloutWorker(env_spec=spec, policy_spec=policy_spec, num_envs=2, rollout_length=64, seed=0)
    try:
        worker.set_weights({k: v.detach().numpy() for k, v in policy_spec.build().state_dict().items()}, version=0)
        batch = worker.sample()
        games = [env.unwrapped for env in worker.venv.envs]
        assert all(g._policy is worker.policy for g in games)
        assert batch.episode_returns and set(batch.episode_returns) <= {-1.0, 0.0, 1.0}
    finally:
        worker.close()


def test_configs_route_the_game_and_refuse_what_does_not_fit(make_cfg):
    probe = validate_config(make_cfg("env=pettingzoo", f"env.id={TICTACTOE}", "algo=ppo"))
    assert probe.agents is None and probe.spec.entry_point == TURN_BASED_ENTRY_POINT
    for overrides, words in (
        (("algo=ippo",), "is a turn-based game, played as a single-agent env against env.opponent; use a single-"),
        (("algo=ppo", "env.opponent=nobody"), "env.opponent: 'nobody' is not one of self, random"),
    ):
        with pytest.raises(ConfigError) as raised:
            validate_config(make_cfg("env=pettingzoo", f"env.id={TICTACTOE}", *overrides))
        assert any(words in p for p in raised.value.problems), raised.value.problems


def run_rlpar(*args, cwd):
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=600)


@pytest.mark.slow
@pytest.mark.parametrize("parallel", [["parallel=local"], ["parallel=multiprocess", "workers=2"]])
def test_tictactoe_trains_with_ppo_and_evaluates_against_random(parallel, tmp_path):
    run_dir = tmp_path / "run"
    done = run_rlpar(
        str(ROOT / "main.py"),
        "env=pettingzoo",
        f"env.id={TICTACTOE}",
        "algo=ppo",
        "total_steps=20000",
        "progress=false",
        f"run_dir={run_dir}",
        *parallel,
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "warn" not in (done.stdout + done.stderr).lower(), done.stderr[-3000:]
    evaluated = run_rlpar(
        "-m", "rlpar", "evaluate", str(run_dir), "--episodes", "40", "--opponent", "random", "--no-video", cwd=tmp_path
    )
    assert evaluated.returncode == 0, evaluated.stderr[-3000:]
    row = json.loads((run_dir / "evaluations.jsonl").read_text().splitlines()[-1])
    assert row["opponent"] == "random" and row["illegal_actions"] == 0 and row["first_mover_games"] == 20
    assert row["win_rate"] + row["draw_rate"] + row["loss_rate"] == pytest.approx(1.0)
    assert 0.0 <= row["first_mover_win_rate"] <= 1.0
    checkpoint = sorted((run_dir / "checkpoints").glob("*.pt"))[-1]
    against_itself = run_rlpar(
        "-m", "rlpar", "evaluate", str(run_dir), "--episodes", "10", "--opponent", str(checkpoint), "--no-video",
        cwd=tmp_path,
    )  # fmt: skip
    assert against_itself.returncode == 0, against_itself.stderr[-3000:]
    row = json.loads((run_dir / "evaluations.jsonl").read_text().splitlines()[-1])
    assert row["opponent"] == str(checkpoint) and row["eval_episodes"] == 10 and row["illegal_actions"] == 0
    refused = run_rlpar("-m", "rlpar", "evaluate", str(run_dir), "--opponent", "nobody", "--no-video", cwd=tmp_path)
    assert refused.returncode == 2 and "--opponent: expected self, random, scripted or a checkpoint file" in refused.stderr


def test_the_game_renders_frames_for_an_evaluations_video():
    spec = resolve_env_spec(kind="pettingzoo", id=TICTACTOE, opponent="random")
    env = make_env(replace(spec, kwargs={**spec.kwargs, "render_mode": "rgb_array"}))
    try:
        env.reset(seed=0)
        frame = env.render()
        assert frame.ndim == 3 and frame.shape[2] == 3 and env.render_mode == "rgb_array"
    finally:
        env.close()


def test_the_self_opponent_plays_the_handed_policys_moves():
    """A policy whose logits favour the centre square, then the corner 0, opens every game it
    moves first in at the centre and never moves at random."""
    spec = resolve_env_spec(kind="pettingzoo", id=TICTACTOE, opponent="self")
    policy_spec, _ = probe_policy_spec(spec, PolicySpec)
    weights = {k: v.detach().numpy().copy() for k, v in policy_spec.build().state_dict().items()}
    weights["weights.2"][0] = 0.0  # the actor's last layer: its logits are its biases
    weights["biases.2"][0, 0] = 0.0
    weights["biases.2"][0, 0, 4], weights["biases.2"][0, 0, 0] = 60.0, 30.0
    policy = policy_spec.acting_policy()
    policy.set_weights(weights)
    env = make_env(spec)
    env.unwrapped.set_opponent_policy(policy)
    try:
        for seed in range(10):
            obs, _ = env.reset(seed=seed)
            if env.unwrapped.learner != env.unwrapped.seats[0]:  # the opponent has made its first move
                opponent_marks = obs["observation"][..., 1].reshape(-1)
                assert opponent_marks.sum() == 1 and opponent_marks[4] == 1
            else:
                obs, *_ = env.step(4 if seed % 4 == 0 else 8)  # the centre taken: the corner 0 answers it
                opponent_marks = obs["observation"][..., 1].reshape(-1)
                assert opponent_marks[0 if seed % 4 == 0 else 4] == 1 and opponent_marks.sum() == 1
    finally:
        env.close()
