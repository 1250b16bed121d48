-- One step of a user's presence: change one session (or nothing), then
-- recompute the user's status from all sessions and the manual status, and
-- publish it when it changed. Atomic, so devices racing on different
-- gateways always leave one consistent status, written and published once.
-- It runs on every status change and ping, so it reads each key once and
-- writes the status hash at most once.
--
-- Invisible users: the status published (and kept in s, since, v, la) is
-- the public one, what followers may know; while the user is invisible it
-- stays what it would be had they gone offline as they went invisible, and
-- the true status lives in t, tt (its since), tl (last activity) for the
-- user's own view. Deciding it here, in the one step that publishes, is
-- what keeps a follower from seeing anything an offline user would not.
--
-- KEYS: 1 status hash, 2 sessions hash, 3 notify set, 4 forward
--       subscriptions, 5 privacy hash (inv "1" while invisible; no expiry)
-- ARGV: 1 op (open|update|close|recompute|privacy), 2 session id, 3 user as a JSON
--       string, 4 channel, 5 publish command (PUBLISH or SPUBLISH), 6 idle
--       threshold ms, 7 last-active granularity ms, 8 offline retention ms,
--       9 max sessions, 10.. op arguments
-- An open may set the user's subscriptions as it opens (the connection
-- named them): ARGV 10 max subscriptions, 11 n, 12.. the users and the full
-- subjects, as applySubs (subs_apply.lua, prepended) takes them.
-- Session record: "<last interaction ms>|<a|i>" (a: active, i: declared inactive).
-- A privacy op (no session: the API key's) sets (ARGV 10 '+') or clears
-- ('-') invisible.
-- Status hash: s shown status, m manual status, since, v, la last activity,
-- x "1" while the hash expires (the user is offline); t, tt, tl while
-- invisible (above).
--
-- Returns {result, changed, status, since, lastActiveAt (rounded), v,
--          sessions, idleIn ms (-1: none active), notify watchers, forward,
--          following, subscribed, own status, own since, own lastActiveAt
--          (rounded), invisible 1|0, own status before ('' none), invisible
--          before 1|0}
-- where changed and the first status are the public ones, and own the
-- user's true status.
-- where forward lists the subscriptions removed because the user went
-- offline, following (open only) the user's subscriptions as the session
-- opens, which its gateway follows, and subscribed (an open that set them)
-- applySubs' answer, with the session count after 'ok' as the
-- subscriptions script gives it. The session opens even when the set is
-- refused; following is then the set as it was, and after 'ok' it is
-- empty: the caller named the set.
local status, sessions, notify, subs, privacy = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local op, sid = ARGV[1], ARGV[2]
local threshold = tonumber(ARGV[6])

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)

local recs = redis.call('HGETALL', sessions)
local cur = redis.call('HMGET', status, 's', 'since', 'v', 'la', 'm', 'x', 't', 'tt', 'tl')
local inv = redis.call('HGET', privacy, 'inv')
local invBefore = inv
local invOp = ''

-- This session's record: its position in recs (0: absent).
local at = 0
for i = 1, #recs, 2 do
  if recs[i] == sid then
    at = i + 1
    break
  end
end

local function parse(rec)
  local sep = string.find(rec, '|', 1, true)
  return tonumber(string.sub(rec, 1, sep - 1)), string.sub(rec, sep + 1)
end

local result = 'ok'
local subscribed = false
local manual, manualBefore = cur[5], cur[5]
if op == 'open' then
  if at == 0 and #recs / 2 >= tonumber(ARGV[9]) then
    return {'too_many_sessions'}
  end
  if ARGV[10] then
    subscribed = applySubs(subs, 'set', ARGV, 12, tonumber(ARGV[11]), tonumber(ARGV[10]))
  end
  local rec = string.format('%d|a', now)
  redis.call('HSET', sessions, sid, rec)
  if at == 0 then
    recs[#recs + 1] = sid
    recs[#recs + 1] = rec
  else
    recs[at] = rec
  end
elseif op == 'close' then
  if at == 0 then
    result = 'absent'
  else
    redis.call('HDEL', sessions, sid)
    table.remove(recs, at)
    table.remove(recs, at - 1)
  end
elseif op == 'privacy' then
  invOp = ARGV[10]
elseif op == 'update' then
  -- ARGV 10: activity (none|active|inactive|idle_ms), 11: idle ms,
  --      12: manual status ('' keep, '-' clear, '=<name>' set),
  --      13: invisible ('' keep, '+' set, '-' clear)
  if at == 0 then
    return {'no_session'}
  end
  invOp = ARGV[13] or ''
  local kind = ARGV[10]
  if kind == 'none' and invOp == '-' and inv then
    -- Coming back on a device is an interaction of it, as the connect of
    -- one who was really offline is: online, last activity now.
    kind = 'active'
  end
  if kind ~= 'none' then
    local la, state = parse(recs[at])
    if kind == 'active' then
      la, state = now, 'a'
    elseif kind == 'inactive' then
      state = 'i'
    elseif kind == 'idle_ms' then
      local seen = now - tonumber(ARGV[11])
      if seen > la then
        la, state = seen, 'a'
      end
    end
    recs[at] = string.format('%d|%s', la, state)
    redis.call('HSET', sessions, sid, recs[at])
  end
  local manualOp = ARGV[12]
  if manualOp == '-' then
    manual = false
  elseif string.sub(manualOp, 1, 1) == '=' then
    manual = string.sub(manualOp, 2)
  end
end

if invOp == '+' and not inv then
  redis.call('HSET', privacy, 'inv', '1')
  inv = '1'
elseif invOp == '-' and inv then
  redis.call('HDEL', privacy, 'inv')
  inv = false
end

-- Recompute from every session: any active one makes the user online.
local count = #recs / 2
local shownBefore = cur[1]
local since = tonumber(cur[2] or '0')
local v = tonumber(cur[3] or '0')
local storedLa = tonumber(cur[4] or '0')
local retention = tonumber(ARGV[8])
if shownBefore == 'offline' and now - since >= retention then
  -- Past the retention an offline user's hash is gone: one kept because
  -- the user is invisible reads (and comes back) as that would.
  shownBefore, since, v, storedLa = false, 0, 0, 0
end
local trueBefore, trueSince = cur[7] or shownBefore, tonumber(cur[8] or since)
local storedTl = math.max(storedLa, tonumber(cur[9] or '0'))
local la = storedTl
local auto, idleIn = 'offline', -1
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
  elseif auto == 'offline' then
    auto = 'idle'
  end
end

local shown = auto
if count == 0 then
  -- Going offline ends a manual status (it lasts until cleared or logout).
  manual = false
elseif manual then
  shown = manual
end
if shown ~= trueBefore then
  trueSince = now
end
local own = shown
if inv then
  shown = 'offline'
end

-- One write of the status hash with every field that changed.
local fields = {}
local changed = 0
local watchers = {}
local gran = tonumber(ARGV[7])
local pla = storedLa
if shown ~= shownBefore and not (shownBefore == false and shown == 'offline') then
  -- Going invisible shows the last activity before it, as going offline
  -- would; no later one is shown until the user is visible again.
  changed = 1
  since = now
  v = v + 1
  pla = la
  fields = {'s', shown, 'since', string.format('%d', since), 'v', v, 'la', string.format('%d', la)}
elseif la > storedLa and not inv then
  pla = la
  fields = {'la', string.format('%d', la)}
end
local lar = pla - (pla % gran)
local invCount = inv and count > 0
if invCount then
  if own ~= cur[7] or trueSince ~= tonumber(cur[8] or '-1') then
    fields[#fields + 1] = 't'
    fields[#fields + 1] = own
    fields[#fields + 1] = 'tt'
    fields[#fields + 1] = string.format('%d', trueSince)
  end
  if la > storedTl then
    fields[#fields + 1] = 'tl'
    fields[#fields + 1] = string.format('%d', la)
  end
elseif cur[7] or cur[8] or cur[9] then
  redis.call('HDEL', status, 't', 'tt', 'tl')
end
if manual and manual ~= manualBefore then
  fields[#fields + 1] = 'm'
  fields[#fields + 1] = manual
end
if #fields > 0 then
  redis.call('HSET', status, unpack(fields))
end
if manualBefore and not manual then
  redis.call('HDEL', status, 'm')
end
if changed == 1 then
  redis.call(ARGV[5], ARGV[4], '{"user":' .. ARGV[3] .. ',"status":' .. cjson.encode(shown) ..
    string.format(',"since":%d,"lastActiveAt":%d,"v":%d,"ts":%d}', since, lar, v, now))
  if shown == 'online' then
    watchers = redis.call('SMEMBERS', notify)
    if #watchers > 0 then
      redis.call('DEL', notify)
    end
  end
end

local forward, following = {}, {}
if count == 0 then
  if cur[6] ~= '1' and (changed == 1 or shownBefore) then
    redis.call('HSET', status, 'x', '1')
    redis.call('PEXPIRE', status, tonumber(ARGV[8]))
  end
  -- Subscriptions live while the user is online; the caller removes the
  -- reverse entries (other hash slots) from the list returned here.
  forward = redis.call('SMEMBERS', subs)
  if #forward > 0 then
    redis.call('DEL', subs)
  end
else
  if cur[6] == '1' then
    redis.call('HDEL', status, 'x')
  end
  if op == 'open' then
    -- On every open of a user with a status hash: one left expiring
    -- without the x mark (written before the mark existed) must not expire
    -- under an online user. A new user has none.
    if shownBefore then
      redis.call('PERSIST', status)
    end
    if subscribed and subscribed[1] == 'ok' then
      subscribed[4] = count
    else
      following = redis.call('SMEMBERS', subs)
    end
  elseif cur[6] == '1' then
    redis.call('PERSIST', status)
  end
end
local ownSince, ownLa = since, lar
if inv then
  ownSince, ownLa = trueSince, la - (la % gran)
end
return {result, changed, shown, since, lar, v, count, idleIn, watchers, forward, following, subscribed,
  own, ownSince, ownLa, inv and 1 or 0, trueBefore or '', invBefore and 1 or 0}
