"""The context shell: token counting and loading a session's context.

The pure parts, context packing and compaction planning, are `core.packing`
and `core.compaction`. ``tokens`` only loads a bundled tokenizer file, once
per process, and never downloads.
"""

from __future__ import annotations

from broker.context.tokens import (
    MESSAGE_OVERHEAD,
    NAME_OVERHEAD,
    REPLY_PRIMING,
    TokenCounter,
    offline_encodings,
)

__all__ = [
    "MESSAGE_OVERHEAD",
    "NAME_OVERHEAD",
    "REPLY_PRIMING",
    "TokenCounter",
    "offline_encodings",
]
