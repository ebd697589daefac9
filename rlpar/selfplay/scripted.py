"""Scripted players of the turn-based games that have one: a fixed reference stronger than
uniform random moves (`env.opponent=scripted`, or `scripted` among the pool's references)."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

# tictactoe's squares by action; the same eight lines whether squares run by row or by column
TICTACTOE_LINES = ((0, 1, 2), (3, 4, 5), (6, 7, 8), (0, 3, 6), (1, 4, 7), (2, 5, 8), (0, 4, 8), (2, 4, 6))


def tictactoe_move(obs: dict, rng: np.random.Generator) -> int:
    """One ply of lookahead: complete a line of its own, else block one of the opponent's, else a
    uniform legal move (`rng`: the game's generator). The observation's planes are the mover's
    marks and the opponent's, square by action."""
    planes = np.asarray(obs["observation"])
    legal = np.flatnonzero(obs["action_mask"])
    for marks in (planes[..., 0].reshape(-1), planes[..., 1].reshape(-1)):  # win, then block
        for square in legal:
            if any(square in line and sum(marks[i] for i in line if i != square) == 2 for line in TICTACTOE_LINES):
                return int(square)
    return int(rng.choice(legal))


SCRIPTED_PLAYERS: dict[str, Callable[[dict, np.random.Generator], int]] = {"tictactoe": tictactoe_move}


def scripted_player(game: str | None) -> Callable[[dict, np.random.Generator], int] | None:
    """The scripted player of `game` (a PettingZoo module such as pettingzoo.classic.tictactoe_v3,
    or an entry point naming it); None where it has none."""
    name = str(game or "").replace(":", ".").rsplit(".", 1)[-1]
    return SCRIPTED_PLAYERS.get(name.rsplit("_v", 1)[0])
