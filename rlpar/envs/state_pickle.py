"""Environment state as one pickle, for exact resume, and the start-up check that it round-trips.

Environments have no common state format, so a checkpoint pickles them. Gymnasium's `EzPickle`
(which MuJoCo, Box2D, Atari and PettingZoo's MPE environments inherit) pickles only the
constructor's arguments: unpickled, such an environment is a new one that was never reset
(PettingZoo's MPE then fails at its first step: `'raw_env' object has no attribute
'agent_selection'`). Here such an object keeps its attributes: it is unpickled as it was saved,
or, where some attributes cannot be pickled (a render surface, a font), built again from its
constructor's arguments with every attribute that could be pickled put back over the new one's.

Whether that gives back the environment that was saved is not known from the pickle alone, so
`state_pickle_problem` checks it once before training: the unpickled copy must step exactly as the
original does. Where it does not (a Box2D world, a class defined inside a function), the run
checkpoints without environment state and a resume starts fresh episodes.
"""

from __future__ import annotations

import io
import pickle

import numpy as np

from rlpar.errors import first_line


def new_instance(cls):
    """An instance of `cls` made without running its `__init__` (all its attributes follow)."""
    return cls.__new__(cls)


def rebuilt_instance(cls, args: tuple, kwargs: dict):
    """An instance of `cls` built from its constructor's arguments (the saved attributes follow)."""
    return cls(*args, **kwargs)


def set_instance_dict(obj, state: dict) -> None:
    """Put the saved attributes back, bypassing EzPickle's `__setstate__` (which rebuilds)."""
    obj.__dict__.update(state)


def pickled_by_constructor(obj) -> bool:
    """Whether `obj` pickles as EzPickle does, only its constructor's arguments (Gymnasium's
    EzPickle, or the same class in old `gym`), and has attributes to save instead."""
    getstate = getattr(type(obj), "__getstate__", None)
    return (
        getattr(getstate, "__qualname__", None) == "EzPickle.__getstate__"
        and hasattr(obj, "_ezpickle_args")
        and isinstance(getattr(obj, "__dict__", None), dict)
    )


class EnvStatePickler(pickle.Pickler):
    """A pickler that saves EzPickle objects by their attributes, not only their constructor's
    arguments. `testing`: ids of EzPickle objects whose attributes an outer pickler is trying
    (an attribute that leads back to one of them is a cycle, which the real pickle memoises)."""

    def __init__(self, file, *, testing: frozenset = frozenset()):
        super().__init__(file, protocol=pickle.HIGHEST_PROTOCOL)
        self.testing = testing

    def reducer_override(self, obj):
        if not pickled_by_constructor(obj) or id(obj) in self.testing:
            return NotImplemented
        testing = self.testing | {id(obj)}
        attributes = {name: value for name, value in obj.__dict__.items() if pickles(value, testing)}
        if len(attributes) == len(obj.__dict__):
            return new_instance, (type(obj),), attributes, None, None, set_instance_dict
        rebuild_args = (type(obj), obj._ezpickle_args, obj._ezpickle_kwargs)
        return rebuilt_instance, rebuild_args, attributes, None, None, set_instance_dict


def pickles(value, testing: frozenset = frozenset()) -> bool:
    try:
        EnvStatePickler(io.BytesIO(), testing=testing).dump(value)
    except Exception:  # whatever a foreign object's reduction raises
        return False
    return True


def dumps_env_state(obj) -> bytes:
    """The pickle of `obj` (an environment, a vector env, a worker's environments) with its state."""
    buffer = io.BytesIO()
    EnvStatePickler(buffer).dump(obj)
    return buffer.getvalue()


def described(err: Exception) -> str:
    """`Type: first line of the message`, or only the type where the message is empty."""
    return f"{type(err).__name__}: {first_line(err)}" if str(err).strip() else type(err).__name__


def state_pickle_problem(env, step) -> str | None:
    """Why `env`'s state cannot travel in a checkpoint, in one line, or None. `env` is pickled and
    unpickled as a checkpoint and a resume would, then `step(copy)` and `step(env)` (one step with
    the same actions, returning what the step returned) must give the same numbers."""
    stage, copy = "pickling", None
    try:
        data = dumps_env_state(env)
        stage = "unpickling"
        copy = pickle.loads(data)
        stage = "stepping the unpickled copy"
        restored = step(copy)
        stage = "stepping it"
        original = step(env)
    except Exception as err:  # user code: any exception
        return f"{stage} failed ({described(err)})"
    finally:
        if copy is not None:
            try:
                copy.close()
            except Exception:
                pass  # a half-restored copy may not close cleanly; it is dropped either way
    try:
        np.testing.assert_equal(restored, original)
    except AssertionError:
        return "the unpickled copy steps differently from the original (some of its state does not pickle)"
    return None


def state_dropped_message(name: str, problem: str) -> str:
    """The one warning of a run whose checkpoints keep no environment state: the cause and the fix."""
    if "local object" in problem:
        fix = "define the environment class at module level, not inside a function"
    else:
        fix = "make the environment's state picklable (or give it __getstate__ and __setstate__)"
    return (
        f"env: {name} cannot be saved in checkpoints: {problem}. Checkpoints keep no environment state, so "
        f"a resume starts fresh episodes; for an exact resume, {fix}"
    )
