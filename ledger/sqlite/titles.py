"""The SQLite ledger's `TitlePort`: a title written after its turn (broker/titler.py).

The job replaces only a mechanical title: a title from any other source stays, and
an unknown turn writes nothing.
"""

from __future__ import annotations

from ledger.live_events import set_title
from ledger.sqlite.connections import Connected


class SqliteTitles(Connected):
    async def set_title(self, turn_id: str, title: str, source: str) -> bool:
        return await self.writer.call(set_title, turn_id, title, source)
