-- Worker links (issue 21): find the worker a tool call spawned, and a dispatch's task
-- item, without a scan. `tool_calls.spawned_session` and `sessions.spawn_tool_call_id`
-- exist since 0001/0002; they are now filled (ledger/dispatch.py, ledger/turns.py).
CREATE INDEX sessions_spawn_tool_call ON sessions(spawn_tool_call_id)
    WHERE spawn_tool_call_id IS NOT NULL;
CREATE INDEX queue_items_dispatch ON queue_items(dispatch_id) WHERE dispatch_id IS NOT NULL;
