"""Self-play for turn-based games: the opponent pool (`env.opponent=pool`) and the ratings of its members."""
