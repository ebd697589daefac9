"""Policy networks: the picklable spec, the torch learner module and the numpy acting copy."""

from rlpar.models.numpy_policy import NumpyPolicy
from rlpar.models.spec import PolicySpec

__all__ = ["NumpyPolicy", "PolicySpec"]
