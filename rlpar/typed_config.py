"""Typed configs: the keys a component takes, declared beside its code as a dataclass whose fields
carry their type, default and range (`number`, `integer`, `flag`, `choice`, `text`).

An algorithm or sampler names its config as the class attribute `Config`; a model spec or the
replay settings is a dataclass already and is its own. rlpar.config.validate imports the class a
`_target_` names and reads these declarations, so every problem of a config is reported in one
message. Torch-free and importing only rlpar.errors, so every layer may declare one.
"""

from __future__ import annotations

import inspect
import math
from dataclasses import MISSING, dataclass, field, fields, is_dataclass
from typing import Any

from rlpar.errors import shown

CHECK = "rlpar_check"  # the metadata key of a field's Check


@dataclass(frozen=True)
class Check:
    """What a field takes: `kind` number, integer, flag (true or false), choice (one of `choices`)
    or text; numbers within [low, high] (open ends with `low_open`, `high_open`), None only when
    `optional`, infinity only with `infinite_ok`, and the values in `also` (such as "auto") as
    they are."""

    kind: str
    low: float | None = None
    high: float | None = None
    low_open: bool = False
    high_open: bool = False
    optional: bool = False
    infinite_ok: bool = False
    choices: tuple = ()
    also: tuple = ()
    words: str = ""  # what it takes, in words, said of any value it refuses ("a gradient step (...) or ready")

    def usable(self, value) -> bool:
        """Whether `value` is of the right kind (a number that is neither NaN nor, unless allowed,
        infinite), so that later rules may compare it."""
        if value in self.also and not isinstance(value, (int, float)) or value is None and self.optional:
            return True
        if self.kind in ("number", "integer"):
            kinds = (int,) if self.kind == "integer" else (int, float)
            if isinstance(value, bool) or not isinstance(value, kinds):
                return False
            return not math.isnan(value) and (self.infinite_ok or not math.isinf(value))
        if self.kind == "flag":
            return isinstance(value, bool)
        if self.kind == "text":
            return isinstance(value, str)
        return any(value == c and type(value) is type(c) for c in self.choices)

    def problem(self, value) -> str | None:
        """Why `value` is refused (a clause to follow the key), or None."""
        if self.words:
            plain = Check(
                self.kind,
                self.low,
                self.high,
                self.low_open,
                self.high_open,
                self.optional,
                self.infinite_ok,
                self.choices,
                self.also,
            )
            return f"expected {self.words}, got {shown(value)}" if plain.problem(value) else None
        if value is None:
            return None if self.optional else f"missing (expected {self.noun()})"
        if self.usable(value):
            return self.range_problem(value) if self.kind in ("number", "integer") else None
        if self.kind == "choice":
            return f"{shown(value)} is not one of {', '.join(map(str, (*self.choices, *self.also)))}"
        if self.kind in ("number", "integer") and isinstance(value, (int, float)) and not isinstance(value, bool):
            if math.isnan(value):
                return f"nan is not a number (expected {self.expected()})"
            if math.isinf(value):
                return f"{shown(value)} is not finite (expected {self.expected(finite=True)})"
        return f"expected {self.noun()}, got {shown(value)}"

    def range_problem(self, value) -> str | None:
        if not isinstance(value, (int, float)) or value in self.also:
            return None
        if self.low is not None and (value <= self.low if self.low_open else value < self.low):
            return f"{shown(value)} is out of range (must be {'>' if self.low_open else '>='} {self.low})"
        if self.high is not None and (value >= self.high if self.high_open else value > self.high):
            return f"{shown(value)} is out of range (must be {'<' if self.high_open else '<='} {self.high})"
        return None

    def expected(self, *, finite: bool = False) -> str:
        """'a number > 0 and <= 1': what a range check takes (NaN, infinity and missing values
        are named with it)."""
        if self.kind not in ("number", "integer"):
            return self.noun()
        bounds = [
            f"{'>' if self.low_open else '>='} {self.low}" if self.low is not None else "",
            f"{'<' if self.high_open else '<='} {self.high}" if self.high is not None else "",
        ]
        noun = "a finite number" if finite and self.kind == "number" else self.noun()
        return " ".join(filter(None, [noun, " and ".join(filter(None, bounds))]))

    def noun(self) -> str:
        """'an integer', 'true or false', ...: the kind of value it takes (with `also`'s values)."""
        words = {"number": "a number", "integer": "an integer", "flag": "true or false", "text": "a string"}.get(
            self.kind, "one of " + ", ".join(map(str, self.choices))
        )
        return " or ".join([words, *map(str, self.also)])


def _declared(default, check: Check, default_factory=MISSING) -> Any:
    if default_factory is not MISSING:
        return field(default_factory=default_factory, metadata={CHECK: check})
    return field(default=default, metadata={CHECK: check})


def number(
    default=MISSING,
    *,
    low: float | None = None,
    high: float | None = None,
    low_open: bool = False,
    high_open: bool = False,
    optional: bool = False,
    infinite_ok: bool = False,
    also: tuple = (),
) -> Any:
    """A float field (an int is taken too) in [low, high]; `also`: other values taken as they are."""
    return _declared(default, Check("number", low, high, low_open, high_open, optional, infinite_ok, also=also))


def integer(
    default=MISSING,
    *,
    low: int | None = None,
    high: int | None = None,
    optional: bool = False,
    also: tuple = (),
    words: str = "",
) -> Any:
    """An int field in [low, high]; `words`: what it takes, said of any value it refuses."""
    return _declared(default, Check("integer", low, high, optional=optional, also=also, words=words))


def flag(default=MISSING) -> Any:
    """A bool field: true or false, never 0, 1 or "yes"."""
    return _declared(default, Check("flag"))


def choice(default, options: tuple, *, optional: bool = False) -> Any:
    """A field that is one of `options` (by value and type: True is not 1)."""
    return _declared(default, Check("choice", optional=optional, choices=tuple(options)))


def text(default=MISSING, *, optional: bool = False) -> Any:
    """A string field."""
    return _declared(default, Check("text", optional=optional))


def config_class(component) -> type | None:
    """The typed config of a component class: its `Config`, or the class itself when it is a
    dataclass (a model spec, the replay settings); None for a class that declares none."""
    declared = getattr(component, "Config", None)
    if isinstance(declared, type) and is_dataclass(declared):
        return declared
    return component if isinstance(component, type) and is_dataclass(component) else None


def declared_keys(config_cls: type) -> frozenset[str]:
    """The keys a typed config takes: its fields, less those a subclass fixes (`init=False`)."""
    return frozenset(f.name for f in fields(config_cls) if f.init)


def checks(config_cls: type) -> dict[str, Check]:
    """Field name -> its Check, for the fields that declare one."""
    return {f.name: f.metadata[CHECK] for f in fields(config_cls) if f.init and CHECK in f.metadata}


def keyword_parameters(cls: type) -> frozenset[str]:
    """The keyword arguments class `cls` takes when it declares no typed config (a user's own
    algorithm): its `__init__`'s, and a `**kwargs` counts as the next base class's."""
    names: set[str] = set()
    for klass in cls.__mro__:
        init = klass.__dict__.get("__init__")
        if init is None:
            continue
        if klass is object:
            break
        parameters = inspect.signature(init).parameters.values()
        taken = (inspect.Parameter.KEYWORD_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
        names |= {p.name for p in parameters if p.kind in taken} - {"self"}
        if not any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters):
            break
    return frozenset(names)


def accepted_keys(cls: type) -> frozenset[str]:
    """What a config node with `_target_: cls` may set: its typed config's keys, or its keywords."""
    declared = config_class(cls)
    return declared_keys(declared) if declared is not None else keyword_parameters(cls)


def capabilities(cls: type) -> dict:
    """What a component class declares as plain class attributes (`model_kind = "q_network"`,
    `action_spaces = (...)`), its bases' included: strings, numbers, booleans, None and tuples."""
    found: dict = {}
    for klass in reversed(cls.__mro__):
        for name, value in vars(klass).items():
            if name.startswith("_"):
                continue
            if value is None or isinstance(value, (str, int, float, bool, tuple)):
                found[name] = value
            else:
                found.pop(name, None)
    return found


def override(base: type, name: str, default, *, fixed: bool = False) -> Any:
    """Field `name` of typed config `base` with another default, its check kept (PPO's lr);
    `fixed`: a value this config sets itself, which a config file may not give (A3C's
    normalize_rewards: its workers see raw rewards)."""
    inherited = base.__dataclass_fields__[name]  # type: ignore[attr-defined]
    return field(default=default, init=not fixed, metadata=inherited.metadata)
