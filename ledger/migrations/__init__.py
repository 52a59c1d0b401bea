"""The SQLite ledger's schema migrations, numbered SQL files applied in order at
start (`ledger.db.migrate`); a data package, no code."""

__all__: list[str] = []
