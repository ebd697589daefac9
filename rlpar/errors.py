"""One-line failure messages, shared by every layer (config, environments, runtime)."""


def first_line(err: Exception) -> str:
    """The first line of an exception's message: enough to name a failure in one line."""
    text = str(err).strip()
    return text.splitlines()[0] if text else type(err).__name__
