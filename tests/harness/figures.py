"""Figures a test measures but cannot bound tightly on a shared machine (an estimate against
its truth from the same run). Each is kept here and printed at the end of the session
(conftest.py: `figure: NAME VALUE key=value...`), so every CI log carries one more sample of
its spread and bench/accuracy.py collects them over repeated runs; the test itself asserts
only what can fail: an ordering, a gross error."""

SEEN: list[str] = []


def figure(name: str, value: float, **context) -> float:
    """Records `figure: NAME VALUE key=value...` for the session's summary; returns the value."""
    extra = " ".join(f"{k}={v}" for k, v in context.items())
    SEEN.append(f"figure: {name} {value:.4g} {extra}".rstrip())
    return value
