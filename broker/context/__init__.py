"""The context core: token counting, context packing and compaction planning.

``packing`` and ``compaction`` are pure (no I/O, no clock); ``tokens`` only loads a
bundled tokenizer file, once per process, and never downloads.
"""

from __future__ import annotations

from broker.context.compaction import (
    CompactionPlan,
    CountsTokens,
    compaction_due,
    fallback_summary,
    plan,
    summary_request,
)
from broker.context.packing import (
    ContextInput,
    ContextPlan,
    Msg,
    TurnBlock,
    WholeHistory,
    assemble,
)
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
    "CompactionPlan",
    "ContextInput",
    "ContextPlan",
    "CountsTokens",
    "Msg",
    "TokenCounter",
    "TurnBlock",
    "WholeHistory",
    "assemble",
    "compaction_due",
    "fallback_summary",
    "offline_encodings",
    "plan",
    "summary_request",
]
