-- One subscription command on a user's forward set, in one call: the
-- session check, then applySubs (subs_apply.lua, prepended). Atomic, so two
-- devices changing subscriptions at once serialise and a session that
-- ended writes nothing (this replaces a WATCH/MULTI/EXEC that took four
-- round trips per connect).
--
-- KEYS: 1 forward set (subs), 2 sessions hash
-- ARGV: 1 op (set|add|remove), 2 session id, 3 max subscriptions,
--       4 n, 5..4+n the users of the command (distinct),
--       5+n.. subjects that already have the most followers allowed
-- Returns {'no_session'}, applySubs' refusals, or {'ok', added, removed,
-- sessions} (sessions: how many the user has now; with one, no other
-- connection needs telling). The set as it is now is not returned: the
-- caller of a set knows it, and the other commands do not need it.
local subs, sessions = KEYS[1], KEYS[2]

if redis.call('HEXISTS', sessions, ARGV[2]) == 0 then
  return {'no_session'}
end

local res = applySubs(subs, ARGV[1], ARGV, 5, tonumber(ARGV[4]), tonumber(ARGV[3]))
if res[1] == 'ok' then
  res[4] = redis.call('HLEN', sessions)
end
return res
