"""What the default config trains per iteration (PPO's CartPole preset,
conf/preset/ppo/CartPole-v1.yaml), for tests that count iterations or env steps."""

ENVS, ROLLOUT_LENGTH = 8, 64
STEPS_PER_ITERATION = ENVS * ROLLOUT_LENGTH
