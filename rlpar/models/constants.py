"""Numbers the torch modules and their acting copies must share exactly, importable without torch."""

LOG_STD_BOUNDS = (-20.0, 2.0)  # an actor_q model's Gaussian log-standard deviations are clamped here (as SB3's SAC)
VALUE_NORM_EPSILON = 1e-5  # added to the returns' variance (value_norm), in the torch actor-critic and its copies
