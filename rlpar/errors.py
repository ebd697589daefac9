"""One-line failure messages, shared by every layer (config, environments, runtime)."""


def first_line(err: BaseException | str) -> str:
    """The first line of an exception's message: enough to name a failure in one line."""
    text = str(err).strip()
    return text.splitlines()[0] if text else type(err).__name__


class EnvironmentFailedError(RuntimeError):
    """An environment rlpar cannot train on: it broke its contract, or kept raising past its
    rebuild limit. Stops the run in one line (with a checkpoint) on every sampler alike."""


class RunDirError(Exception):
    """The run directory cannot be written (read-only, full, removed): raised by the logger and
    the checkpointer alike."""


SHOWN_CHARS = 60  # of a value quoted in a message


def positive_integers(values) -> bool:
    """Whether `values` is a list of integers above 0 (not bools): a config check that the model
    specs and validation share."""
    return isinstance(values, list) and all(isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in values)


def shown(value) -> str:
    """`value` as a one-line message quotes it: its repr, cut short (a 10 KB id is not echoed whole)."""
    text = repr(value)
    return text if len(text) <= SHOWN_CHARS else f"{text[: SHOWN_CHARS - 3]}... ({len(text)} characters)"


class ServiceLost(RuntimeError):
    """A side service (a parameter server, a replay shard) a worker called is gone: the learner
    restarts it and sends the new address (rlpar.sampling.services)."""


class LearnerGroupError(RuntimeError):
    """The learner group (learners=N) cannot go on: no room on the cluster for its ranks, or it
    failed too many times in a row. Stops the run in one line, with a checkpoint."""
