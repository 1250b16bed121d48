-- One subscription command on a user's forward set, in one call: the
-- session check, the diff against the stored set, the limits and the write.
-- Atomic, so two devices changing subscriptions at once serialise and a
-- session that ended writes nothing (this replaces a WATCH/MULTI/EXEC that
-- took four round trips per connect).
--
-- KEYS: 1 forward set (subs), 2 sessions hash
-- ARGV: 1 op (set|add|remove), 2 session id, 3 max subscriptions,
--       4 n, 5..4+n the users of the command (distinct),
--       5+n.. subjects that already have the most followers allowed
-- Returns {'no_session'}, {'too_many', count}, {'full', {users}} or
--         {'ok', added, removed, sessions} (sessions: how many the user has
--         now; with one, no other connection needs telling). added is 'all'
--         when every user of the command was added (a connection's first
--         set): the caller has the list. The set as it is now is not
--         returned: the caller of a set knows it, and the other commands do
--         not need it.
local subs, sessions = KEYS[1], KEYS[2]
local op, sid, maxSubs, n = ARGV[1], ARGV[2], tonumber(ARGV[3]), tonumber(ARGV[4])

if redis.call('HEXISTS', sessions, sid) == 0 then
  return {'no_session'}
end

-- In chunks: Lua's unpack takes a few thousand values at most.
local function apply(cmd, members, from, to)
  for i = from, to, 1000 do
    redis.call(cmd, subs, unpack(members, i, math.min(i + 999, to)))
  end
end

local old = redis.call('SMEMBERS', subs)

-- A first set or add (every new connection's): everything named is added
-- and nothing removed, so no diff tables are built; this is half the cost.
if #old == 0 and op ~= 'remove' then
  if n > maxSubs then
    return {'too_many', n}
  end
  -- The subjects at the cap are among those named, so all are refused.
  if #ARGV > 4 + n then
    return {'full', {unpack(ARGV, 5 + n)}}
  end
  apply('SADD', ARGV, 5, 4 + n)
  local sessionCount = redis.call('HLEN', sessions)
  if n == 0 then
    return {'ok', {}, {}, sessionCount}
  end
  return {'ok', 'all', {}, sessionCount}
end

local have = {}
for _, u in ipairs(old) do
  have[u] = true
end

local all, added, removed = {}, {}, {}
if op == 'set' then
  local want = {}
  for i = 5, 4 + n do
    local u = ARGV[i]
    want[u] = true
    all[#all + 1] = u
    if not have[u] then
      added[#added + 1] = u
    end
  end
  for _, u in ipairs(old) do
    if not want[u] then
      removed[#removed + 1] = u
    end
  end
elseif op == 'add' then
  for _, u in ipairs(old) do
    all[#all + 1] = u
  end
  for i = 5, 4 + n do
    local u = ARGV[i]
    if not have[u] then
      have[u] = true
      added[#added + 1] = u
      all[#all + 1] = u
    end
  end
else
  local drop = {}
  for i = 5, 4 + n do
    local u = ARGV[i]
    if have[u] then
      drop[u] = true
      removed[#removed + 1] = u
    end
  end
  for _, u in ipairs(old) do
    if not drop[u] then
      all[#all + 1] = u
    end
  end
end

if #all > maxSubs then
  return {'too_many', #all}
end
if #added > 0 and #ARGV > 4 + n then
  local full = {}
  for i = 5 + n, #ARGV do
    full[ARGV[i]] = true
  end
  local refused = {}
  for _, u in ipairs(added) do
    if full[u] then
      refused[#refused + 1] = u
    end
  end
  if #refused > 0 then
    return {'full', refused}
  end
end

apply('SREM', removed, 1, #removed)
apply('SADD', added, 1, #added)
local sessionCount = redis.call('HLEN', sessions)
if op ~= 'remove' and n > 0 and #added == n then
  return {'ok', 'all', removed, sessionCount}
end
return {'ok', added, removed, sessionCount}
