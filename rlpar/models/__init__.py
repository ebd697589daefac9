"""Policy networks: the picklable, torch-free specs and shared constants (here), the torch learner
modules (modules/: MLP and CNN actor-critics, Q-networks) and their acting copies (acting/: numpy,
or torch for the large CNNs)."""

from rlpar.models.acting.numpy_policy import NumpyPolicy
from rlpar.models.spec import PolicySpec

__all__ = ["NumpyPolicy", "PolicySpec"]
