-- A session's events are append-only (seed 004; docs/forgetting.md): a message, a
-- tool call or a turn event, once written, is never changed. The one change allowed
-- is the forgetting of a person (ledger/erasure.py), which sets a message's
-- `content` to '[erased]' and nothing else, and an intent's quote of them likewise. Rows go only whole, with their turn or
-- session, when a person is forgotten, a turn expires or the library deletes a
-- session; a trigger cannot tell those deletes from another, so they are not refused
-- here, and no other write deletes these rows (tests/conformance/test_append_only.py).
-- The forgetting also rewrites the broker's `intent` event of a group turn that
-- quoted the person (ledger/erasure.py `forget_intents`): its payload, and only
-- that, to one that names '[erased]' in their place.
CREATE TRIGGER turn_events_never_change BEFORE UPDATE ON turn_events
    WHEN NOT (OLD.type = 'intent' AND NEW.type = 'intent' AND NEW.turn_id IS OLD.turn_id
              AND NEW.seq IS OLD.seq AND NEW.session_label IS OLD.session_label
              AND NEW.created_at IS OLD.created_at AND NEW.session_seq IS OLD.session_seq
              AND instr(NEW.payload, '"[erased]"') > 0)
BEGIN
    SELECT RAISE(ABORT, 'events are append-only');
END;
CREATE TRIGGER tool_calls_never_change BEFORE UPDATE ON tool_calls BEGIN
    SELECT RAISE(ABORT, 'events are append-only');
END;
CREATE TRIGGER messages_only_forget BEFORE UPDATE ON messages
    WHEN NOT (NEW.content IS '[erased]' AND NEW.id IS OLD.id AND NEW.turn_id IS OLD.turn_id
              AND NEW.seq IS OLD.seq AND NEW.role IS OLD.role AND NEW.channel IS OLD.channel
              AND NEW.msg_id IS OLD.msg_id AND NEW.item_id IS OLD.item_id
              AND NEW.sender_id IS OLD.sender_id AND NEW.tokens IS OLD.tokens
              AND NEW.created_at IS OLD.created_at)
BEGIN
    SELECT RAISE(ABORT, 'events are append-only');
END;

-- The active sessions, for the idle close's search (ledger/closing.py
-- `idle_candidates`): it reads the active ones, not every session ever closed. A
-- session's status changes rarely (created, closed, merged, erased), so the index
-- costs nothing on the message and turn writes.
CREATE INDEX sessions_active ON sessions(label) WHERE status = 'active';
