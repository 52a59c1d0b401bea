"""`brokerctl`: the operator's command line. It talks to a running daemon over the
wire protocol (`wire.client`), and reads a stopped ledger directly only for
`doctor`, `backup`, `export` and `import`."""

__all__ = [
    "app",
    "context",
    "doctor",
    "files",
    "main",
    "routes",
    "state",
    "threads",
    "timers",
    "workers",
]
