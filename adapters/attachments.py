"""Attachments as inbound metadata: one shape for every adapter. Pure (no I/O).

An attachment is `{"name", "type", "size", "url"}` in `meta.attachments`: the file's
name, its media type, its size in bytes, and where it can be fetched (a URL of the
channel's own scheme, like Matrix's mxc); an adapter may add keys of its own
(Matrix's `kind`). What the channel does not say is null, never a guess dressed as a
fact: a size is only ever what the sender or the file's server said. The type may
come from the name's extension when nothing better says it (`mimetypes`, without its
system files: the same answer on every host), and a name from the URL's last path
segment. The text is never dropped for an attachment, and an attachment never replaces
the text: a message whose only content is a file keeps the file's URL (else its name)
as its text.
"""

from __future__ import annotations

import mimetypes
from typing import Any
from urllib.parse import unquote, urlsplit

# Built from the module's own table only: /etc/mime.types differs between hosts.
_TYPES = mimetypes.MimeTypes(filenames=())


def attachment(
    name: str | None, type_: str | None, size: int | None, url: str | None, **extra: Any
) -> dict[str, Any]:
    """One attachment: what the channel did not say is None."""
    return {"name": name or None, "type": type_ or None, "size": size, "url": url or None, **extra}


def name_from_url(url: str) -> str | None:
    """The URL's last path segment, percent-decoded."""
    segment = urlsplit(url).path.rstrip("/").rpartition("/")[2]
    return unquote(segment) or None


def type_from_name(name: str | None) -> str | None:
    """The media type the name's extension stands for, if it is a known one."""
    if not name:
        return None
    return _TYPES.guess_type(name, strict=False)[0]


def size_of(value: Any) -> int | None:
    """A size a message states, or None if it states none (or nonsense)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, str) and value.strip().isdigit():
        value = int(value)
    return value if isinstance(value, int) and value >= 0 else None


def text_with(body: str, attachments: list[dict[str, Any]]) -> str:
    """The body, else what names the attachments."""
    if body or not attachments:
        return body
    return "\n".join(str(a.get("url") or a.get("name") or "") for a in attachments).strip()
