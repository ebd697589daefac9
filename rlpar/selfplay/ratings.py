"""Elo-style ratings of a self-play run's policies, fitted from the games it logged (`rlpar report`).

Each iteration's metrics row holds its games per opponent (`games_by_opponent`: [won, drawn,
lost] of the learner) and the newest snapshot then (`pool_latest`). The learner of an iteration
is rated as that snapshot (its weights a few updates on), the learner after the last snapshot as
`current`; games against itself (`self`) say nothing of its strength and are left out. Ratings
are a Bradley-Terry fit (a draw counts half a win), on Elo's scale (400 points: 10 to 1 odds),
with `random` anchored at 1000; every player also gets one virtual draw against the anchor,
so a player that never lost has a finite rating.
"""

from __future__ import annotations

import math
from collections import defaultdict

from rlpar.selfplay.pool import RANDOM, SELF

ANCHOR, ANCHOR_RATING = RANDOM, 1000.0
CURRENT = "current"
FIT_ITERATIONS = 2000  # at most; the fit stops once no rating moves by more than CONVERGED (in log odds)
CONVERGED = 1e-7


def rated_games(rows: list[dict]) -> dict[tuple[str, str], list[float]]:
    """(player, opponent) -> [won, drawn, lost] summed over the rows that logged games."""
    logged = [row for row in rows if isinstance(row.get("games_by_opponent"), dict)]
    last = logged[-1].get("pool_latest") if logged else None
    games: dict[tuple[str, str], list[float]] = defaultdict(lambda: [0.0, 0.0, 0.0])
    for row in logged:
        player = row.get("pool_latest") or CURRENT
        player = CURRENT if player == last else player
        for opponent, tally in row["games_by_opponent"].items():
            if opponent in (SELF, player):
                continue
            total = games[(player, opponent)]
            for i in range(3):
                total[i] += float(tally[i])
    return dict(games)


def fit_ratings(games: dict[tuple[str, str], list[float]]) -> dict[str, float]:
    """Each player's rating (see the module docstring), by Hunter's MM iterations of the
    Bradley-Terry fit."""
    players = sorted({p for pair in games for p in pair} | {ANCHOR})
    score: dict[str, float] = defaultdict(float)  # each player's wins, draws counting half
    meetings: dict[tuple[str, str], float] = defaultdict(float)  # games between each pair, both ways
    for (a, b), (won, drawn, lost) in games.items():
        score[a] += won + drawn / 2
        score[b] += lost + drawn / 2
        meetings[(a, b)] += won + drawn + lost
        meetings[(b, a)] += won + drawn + lost
    for p in players:  # one virtual draw against the anchor
        if p != ANCHOR:
            score[p] += 0.5
            score[ANCHOR] += 0.5
            meetings[(p, ANCHOR)] += 1
            meetings[(ANCHOR, p)] += 1
    strength = dict.fromkeys(players, 1.0)
    opponents = defaultdict(list)
    for a, b in meetings:
        opponents[a].append(b)
    for _ in range(FIT_ITERATIONS):
        before = dict(strength)
        for p in players:
            denominator = sum(meetings[(p, q)] / (strength[p] + strength[q]) for q in opponents[p])
            strength[p] = max(score[p], 1e-9) / denominator if denominator else strength[p]
        anchor = strength[ANCHOR]
        strength = {p: s / anchor for p, s in strength.items()}
        if max(abs(math.log(strength[p] / before[p])) for p in players) < CONVERGED:
            break
    return {p: ANCHOR_RATING + 400.0 * math.log10(s) for p, s in strength.items()}


def rating_table(rows: list[dict]) -> list[dict]:
    """Rows of the rating table, best first: player, rating, games, the player's score (wins and
    half the draws over its games); [] where the run logged no games."""
    games = rated_games(rows)
    if not games:
        return []
    ratings = fit_ratings(games)
    played: dict[str, float] = defaultdict(float)
    scored: dict[str, float] = defaultdict(float)
    for (a, b), (won, drawn, lost) in games.items():
        n = won + drawn + lost
        played[a] += n
        played[b] += n
        scored[a] += won + drawn / 2
        scored[b] += lost + drawn / 2
    table = [
        {
            "player": p,
            "rating": rating,
            "games": int(played[p]),
            "score": scored[p] / played[p] if played[p] else None,
        }
        for p, rating in ratings.items()
    ]
    return sorted(table, key=lambda row: -row["rating"])
