"""Which isolation levels this machine offers (the tests of a level skip where it has none)."""

from verl.rewards.sandbox.isolation import probe


def available(level: str) -> bool:
    """Whether ``probe(level)`` finds a working ``level`` here."""
    try:
        probe(level)
        return True
    except RuntimeError:
        return False
