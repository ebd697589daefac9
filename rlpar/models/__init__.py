"""Policy networks: the picklable specs, the torch learner modules (MLP and CNN actor-critics,
Q-networks) and their acting copies (numpy, or torch for the large CNNs)."""

from rlpar.models.acting.numpy_policy import NumpyPolicy
from rlpar.models.spec import PolicySpec

__all__ = ["NumpyPolicy", "PolicySpec"]
