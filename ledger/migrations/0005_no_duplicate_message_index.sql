-- messages has had UNIQUE (turn_id, seq) since 0002, which SQLite keeps as an
-- index on exactly those columns; messages_turn (0003) was a second one, which
-- cost every stored message another B-tree insert and every commit its pages.
DROP INDEX messages_turn;
