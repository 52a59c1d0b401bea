-- Test only (tests/realservers): a server that answers some messages with a
-- stanza error, as a rate-limited room or server would.
--
-- A message from the account `bounce_from` whose body holds
-- "[bounce:<type>:<condition>:<n>]" is refused with that error the first <n>
-- times its id is seen; after that it is routed as usual.
local st = require "util.stanza";

local bounce_from = module:get_option_string("bounce_from", "bot");
local seen = {};

local function bounce(event)
	local origin, stanza = event.origin, event.stanza;
	if origin.type ~= "c2s" or origin.username ~= bounce_from then return; end
	local body = stanza:get_child_text("body");
	if not body then return; end
	local etype, condition, times = body:match("%[bounce:(%a+):([%a%-]+):(%d+)%]");
	if not etype then return; end
	local key = (stanza.attr.id or "") .. "\0" .. body;
	local count = (seen[key] or 0) + 1;
	seen[key] = count;
	if count > tonumber(times) then return; end
	module:log("info", "bouncing %s (%d of %s) with %s/%s", stanza.attr.id, count, times, etype, condition);
	origin.send(st.error_reply(stanza, etype, condition, "test bounce"));
	return true;
end

module:hook("pre-message/bare", bounce, 1000);
module:hook("pre-message/full", bounce, 1000);
