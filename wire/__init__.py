"""The wire protocol (PROTOCOL.md) in one place: framing, the frames and their
checks, a frame reader for servers, and the one client that adapters, brokerctl
and the library's `Store.connect` share."""

__all__ = [
    "client",
    "frames",
    "framing",
    "reader",
]
