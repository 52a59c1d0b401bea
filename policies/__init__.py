"""Routing policies: rules matched first to last that map a sender and a
conversation to a session key, a persona and queue modes (`model`), and the
per-sender rate limits (`ratelimit`). Pure: the clock comes in as a parameter."""

__all__ = [
    "model",
    "ratelimit",
]
