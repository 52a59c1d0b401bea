"""The PostgreSQL ledger's schema migrations, numbered SQL files applied in order
(`ledger.postgres.schema`); a data package, no code."""

__all__: list[str] = []
