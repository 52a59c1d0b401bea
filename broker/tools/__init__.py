"""Broker tools: what an agent may ask the broker to do mid-turn (`agent_send`,
`conversation_recall`, the scratchpad, timers, compaction, `worker_done`)."""

__all__ = [
    "context",
    "recall",
    "session",
    "table",
    "workers",
]
