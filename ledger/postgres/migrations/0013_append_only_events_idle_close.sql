-- Events are append-only, as the SQLite ledger's migration
-- `append_only_events_idle_close` keeps them: a message, a tool call or a turn event
-- is never changed, but for a message's `content` set to '[erased]' by the
-- forgetting of a person. Deletes are the
-- forgetting's own (erasure, expiry, the library's delete) and are not refused.
CREATE FUNCTION events_never_change() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
BEGIN
    RAISE EXCEPTION 'events are append-only';
END
$$;
CREATE FUNCTION messages_only_forget() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
BEGIN
    IF NEW.content IS NOT DISTINCT FROM '[erased]'
        AND NEW.id = OLD.id AND NEW.turn_id = OLD.turn_id AND NEW.seq = OLD.seq
        AND NEW.role = OLD.role AND NEW.channel IS NOT DISTINCT FROM OLD.channel
        AND NEW.msg_id IS NOT DISTINCT FROM OLD.msg_id
        AND NEW.item_id IS NOT DISTINCT FROM OLD.item_id
        AND NEW.sender_id IS NOT DISTINCT FROM OLD.sender_id
        AND NEW.tokens IS NOT DISTINCT FROM OLD.tokens AND NEW.created_at = OLD.created_at THEN
        RETURN NEW;
    END IF;
    RAISE EXCEPTION 'events are append-only';
END
$$;
-- The forgetting also rewrites a group turn's `intent` that quoted the person
-- (ledger/erasure.py `forget_intents`): its payload only, naming '[erased]'.
CREATE FUNCTION intents_only_forget() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
BEGIN
    IF OLD.type = 'intent' AND NEW.type = 'intent' AND NEW.turn_id = OLD.turn_id
        AND NEW.seq = OLD.seq AND NEW.session_label = OLD.session_label
        AND NEW.created_at = OLD.created_at
        AND NEW.session_seq IS NOT DISTINCT FROM OLD.session_seq
        AND strpos(NEW.payload::text, '"[erased]"') > 0 THEN
        RETURN NEW;
    END IF;
    RAISE EXCEPTION 'events are append-only';
END
$$;
CREATE TRIGGER turn_events_never_change BEFORE UPDATE ON turn_events
    FOR EACH ROW EXECUTE FUNCTION intents_only_forget();
CREATE TRIGGER tool_calls_never_change BEFORE UPDATE ON tool_calls
    FOR EACH ROW EXECUTE FUNCTION events_never_change();
CREATE TRIGGER messages_only_forget BEFORE UPDATE ON messages
    FOR EACH ROW EXECUTE FUNCTION messages_only_forget();

-- The active sessions, for the idle close's search, as on SQLite.
CREATE INDEX sessions_active ON sessions(label) WHERE status = 'active';
