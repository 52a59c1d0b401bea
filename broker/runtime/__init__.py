"""Where sessions run: `[runtime] kind = "local"` (the in-process actors of
`broker/mailbox/`) or `"temporal"` (each session a Temporal workflow: `temporal/`)."""


class RuntimeUnreachable(Exception):
    """The runtime's service cannot be reached at start (exit 69, naming its address)."""


__all__ = ["RuntimeUnreachable", "temporal"]
