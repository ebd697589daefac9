"""Command-line overrides that Hydra would refuse with a traceback or without naming the key."""

from __future__ import annotations

from rlpar.config.validate import first_line


def override_problems(overrides: list[str]) -> list[str]:
    """Command-line overrides Hydra would refuse with a traceback or without naming them:
    malformed ones like `algo.lr=[1,2` and group choices that are not names like `algo=3`."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    parser = OverridesParser.create()
    problems = []
    for text in overrides:
        if text.startswith("-") or "=" not in text:
            continue  # Hydra flags and their values (-m, --cfg job); Hydra names a bare `key` itself
        try:
            override = parser.parse_overrides([text])[0]
        except Exception as err:  # Hydra's parse errors, one per kind of syntax mistake
            problems.append(f"{text.partition('=')[0]}: '{text}' is not a valid override ({_parse_reason(err)})")
            continue
        problem = _group_choice_problem(override, text)
        if problem:
            problems.append(problem)
    return problems


def _parse_reason(err: Exception) -> str:
    reason = first_line(err)
    return "unexpected character; quote values with special characters" if "LexerNoViableAlt" in reason else reason


def _group_choice_problem(override, text: str) -> str | None:
    from rlpar.config.compose import CONF_DIR

    group = override.key_or_group
    if override.is_sweep_override() or not (CONF_DIR / group).is_dir():
        return None
    value = override.value()
    if isinstance(value, (str, dict)) or (value is None and override.is_delete()):
        return None
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return None
    if not group:
        return f"'{text}': no key before '='"
    options = ", ".join(sorted(p.stem for p in (CONF_DIR / group).glob("*.yaml")))
    return f"{group}: '{text.partition('=')[2]}' is not an option of this config group (one of: {options})"
