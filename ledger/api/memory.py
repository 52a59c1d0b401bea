"""Where `Store.memory()` keeps its ledger: a private folder in RAM.

A memory store is an ordinary ledger (the same schema, migrations and calls) in a
folder of its own under `/dev/shm` (tmpfs: its pages live in RAM), made readable by
its owner alone and removed with everything in it when the store closes. Where there
is no writable `/dev/shm` the folder is made in the system's temporary directory
instead (`tempfile`), which may be on disk; `in_ram` says which. Nothing of it
outlives the store: not the data, not the file.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

SHM = Path("/dev/shm")
PREFIX = "agent-broker-memory-"


def make_folder() -> Path:
    """A new private folder for one memory store (mode 0700)."""
    where = str(SHM) if SHM.is_dir() and os.access(SHM, os.W_OK | os.X_OK) else None
    return Path(tempfile.mkdtemp(prefix=PREFIX, dir=where))


def in_ram(folder: Path) -> bool:
    return folder.parent == SHM


def remove(folder: Path) -> None:
    shutil.rmtree(folder, ignore_errors=True)
