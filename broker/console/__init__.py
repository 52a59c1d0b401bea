"""The web console (the optional extra `console`): sessions, turn trees, live turns, actions.

`app.Console` serves the pages on `[console] address` behind the tokens of
`[console] token_file` (`tokens`); `tree` lays a session's turns out as rows.
"""

from broker.console.tokens import Role, Tokens

__all__ = ["Role", "Tokens"]
