"""A real CartPole rollout for learner tests: 4 environments for 32 steps, episode ends included."""

from rlpar.envs.factory import resolve_env_spec
from rlpar.learning.peers import BatchShape
from rlpar.models.spec import PolicySpec
from rlpar.runtime.build import probe_policy_spec
from rlpar.sampling.rollout import RolloutWorker

# In place of a sampler, for a learner tested on its own: it samples nothing, keeps no replay, and
# takes batches longer than any minibatch (its step is never compiled for one whole batch).
LEARNER_ONLY = BatchShape(rollout_length=10**9)


def cartpole_rollout(make_algorithm, *, spec_class=PolicySpec, seed: int = 0):
    """(policy spec, batch), acted with the initial weights of `make_algorithm(policy_spec)`
    (`spec_class`: the network it learns, an actor-critic unless told), from environments seeded `seed`."""
    policy_spec, _ = probe_policy_spec(resolve_env_spec(id="CartPole-v1"), spec_class, normalize_obs=False)
    worker = RolloutWorker(env_spec=resolve_env_spec(id="CartPole-v1"), policy_spec=policy_spec, num_envs=4,
                           rollout_length=32, seed=seed)
    try:
        worker.set_weights(make_algorithm(policy_spec).get_weights(), version=0)
        batch = worker.sample()
    finally:
        worker.close()
    assert batch.terminated.any() and not batch.valid.all()
    return policy_spec, batch


def made(algorithm_class, **arguments):
    """`algorithm_class` built as the builder builds it: its typed config (`Config`) from the keys
    given, the builder's own arguments (sampler, policy_spec, total_steps, seed, device) beside it."""
    built = {k: arguments.pop(k) for k in ("sampler", "policy_spec", "total_steps", "seed", "device") if k in arguments}
    return algorithm_class(algorithm_class.Config(**arguments), **built)
