"""Environments written as users often write them: the class defined inside the factory function,
so instances cannot be pickled (`Can't pickle local object`) and checkpoints cannot hold them."""

from gymnasium.envs.classic_control.cartpole import CartPoleEnv


def local_cartpole(**kwargs):
    """CartPole from a class that exists only inside this function (what env.entry_point names)."""

    class LocalCartPole(CartPoleEnv):
        pass

    return LocalCartPole(**kwargs)
