"""Conversation recall: full-text search over the verbatim history, the reads around
a hit, the recall hint's read and which sessions a search covers."""

__all__ = [
    "answer",
    "hint",
    "reads",
    "scope",
    "search",
    "thread",
]
