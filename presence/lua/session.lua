-- One step of a user's presence: change one session (or nothing), then
-- recompute the user's status from all sessions and the manual status, and
-- publish it when it changed. Atomic, so devices racing on different
-- gateways always leave one consistent status, written and published once.
--
-- KEYS: 1 status hash, 2 sessions hash, 3 notify set, 4 forward subscriptions
-- ARGV: 1 op (open|update|close|recompute), 2 session id, 3 user,
--       4 channel, 5 publish command (PUBLISH or SPUBLISH), 6 idle threshold ms,
--       7 last-active granularity ms, 8 offline retention ms, 9 max sessions,
--       10.. op arguments
-- Session record: "<last interaction ms>|<a|i>" (a: active, i: declared inactive).
--
-- Returns {result, changed, status, since, lastActiveAt (rounded), v,
--          sessions, idleIn ms (-1: none active), notify watchers, forward}
-- where forward lists the subscriptions removed because the user went offline.
local status, sessions, notify, subs = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local op, sid, user, channel, pubcmd = ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5]
local threshold = tonumber(ARGV[6])
local gran = tonumber(ARGV[7])
local retention = tonumber(ARGV[8])
local maxSessions = tonumber(ARGV[9])

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)

local function parse(rec)
  local sep = string.find(rec, '|', 1, true)
  return tonumber(string.sub(rec, 1, sep - 1)), string.sub(rec, sep + 1)
end

local result = 'ok'
if op == 'open' then
  if redis.call('HEXISTS', sessions, sid) == 0 and redis.call('HLEN', sessions) >= maxSessions then
    return {'too_many_sessions'}
  end
  redis.call('HSET', sessions, sid, string.format('%d|a', now))
elseif op == 'close' then
  if redis.call('HDEL', sessions, sid) == 0 then
    result = 'absent'
  end
elseif op == 'update' then
  -- ARGV 10: activity (none|active|inactive|idle_ms), 11: idle ms,
  --      12: manual status ('' keep, '-' clear, '=<name>' set)
  local rec = redis.call('HGET', sessions, sid)
  if not rec then
    return {'no_session'}
  end
  local la, state = parse(rec)
  local kind = ARGV[10]
  if kind == 'active' then
    la, state = now, 'a'
  elseif kind == 'inactive' then
    state = 'i'
  elseif kind == 'idle_ms' then
    local at = now - tonumber(ARGV[11])
    if at > la then
      la, state = at, 'a'
    end
  end
  if kind ~= 'none' then
    redis.call('HSET', sessions, sid, string.format('%d|%s', la, state))
  end
  local manualOp = ARGV[12]
  if manualOp == '-' then
    redis.call('HDEL', status, 'm')
  elseif string.sub(manualOp, 1, 1) == '=' then
    redis.call('HSET', status, 'm', string.sub(manualOp, 2))
  end
end

-- Recompute from every session: any active one makes the user online.
local recs = redis.call('HGETALL', sessions)
local count = #recs / 2
local cur = redis.call('HMGET', status, 's', 'since', 'v', 'la', 'm')
local shownBefore = cur[1]
local since = tonumber(cur[2] or '0')
local v = tonumber(cur[3] or '0')
local storedLa = tonumber(cur[4] or '0')
local manual = cur[5]
local la = storedLa
local auto, idleIn = 'offline', -1
if count > 0 then
  auto = 'idle'
  for i = 2, #recs, 2 do
    local sla, state = parse(recs[i])
    if sla > la then
      la = sla
    end
    local left = threshold - (now - sla)
    if state == 'a' and left > 0 then
      auto = 'online'
      if left > idleIn then
        idleIn = left
      end
    end
  end
end

local shown = auto
if count == 0 then
  -- Going offline ends a manual status (it lasts until cleared or logout).
  if manual then
    redis.call('HDEL', status, 'm')
  end
elseif manual then
  shown = manual
end

local changed = 0
local watchers = {}
local lar = la - (la % gran)
if shown ~= shownBefore and not (shownBefore == false and shown == 'offline') then
  changed = 1
  since = now
  v = v + 1
  redis.call('HSET', status, 's', shown, 'since', string.format('%d', since), 'v', v, 'la', string.format('%d', la))
  local payload = '{"user":' .. cjson.encode(user) .. ',"status":' .. cjson.encode(shown) ..
    string.format(',"since":%d,"lastActiveAt":%d,"v":%d,"ts":%d}', since, lar, v, now)
  redis.call(pubcmd, channel, payload)
  if shown == 'online' then
    watchers = redis.call('SMEMBERS', notify)
    if #watchers > 0 then
      redis.call('DEL', notify)
    end
  end
elseif la > storedLa then
  redis.call('HSET', status, 'la', string.format('%d', la))
end

local forward = {}
if count == 0 then
  if redis.call('EXISTS', status) == 1 then
    redis.call('PEXPIRE', status, retention)
  end
  -- Subscriptions live while the user is online; the caller removes the
  -- reverse entries (other hash slots) from the list returned here.
  forward = redis.call('SMEMBERS', subs)
  if #forward > 0 then
    redis.call('DEL', subs)
  end
else
  redis.call('PERSIST', status)
end
return {result, changed, shown, since, lar, v, count, idleIn, watchers, forward}
