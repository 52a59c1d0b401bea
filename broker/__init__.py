"""The daemon's shell (`brokerd`): the socket server, ingress and routing, the
mailbox actors, engines, deliveries, operator ops and agent tools, all under one
task group (`daemon`). It decides nothing itself that the pure `core` can decide,
and reaches storage only through the ledger port (`ledger.port`)."""

__all__ = [
    "cluster_push",
    "config",
    "config_reference",
    "connection",
    "context",
    "daemon",
    "daemon_cli",
    "deliveries",
    "engines",
    "ingress",
    "logfollow",
    "mailbox",
    "ops",
    "reactions",
    "router",
    "runtime",
    "server",
    "systemd",
    "timers",
    "titler",
    "tools",
]
