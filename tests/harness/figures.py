"""Figures a test measures but cannot bound tightly on a shared machine: each is printed on
one line that bench/accuracy.py collects over repeated runs, to report its spread (the test
itself asserts only what can fail: an ordering, a gross error)."""


def figure(name: str, value: float, **context) -> float:
    """Prints `figure: NAME VALUE key=value...` (seen with pytest -s) and returns the value."""
    extra = " ".join(f"{k}={v}" for k, v in context.items())
    print(f"figure: {name} {value:.4g} {extra}".rstrip(), flush=True)
    return value
