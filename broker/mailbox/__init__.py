"""A session's mailbox: what arriving messages do to it (queue modes) and when turns run.

``broker.mailbox.machine`` is the pure, I/O-free state machine; the shell that drives it
(clock, engine, ledger) lives beside it.
"""
