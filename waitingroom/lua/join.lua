-- Join the line or read one's place in it, in one atomic step on Redis's own
-- clock: prune expired leases, answer "admitted" to a live lease, keep an
-- existing place (rejoining never sends anyone back), take a sequence number
-- only for a new entry, refresh the heartbeat, and answer the rank.
--
-- KEYS: 1 line, 2 leases, 3 sequence, 4 settings, 5 state, 6 old-layout
--       queue, 7 old-layout heartbeats (entry.lua)
-- ARGV: 1 user, 2 "join" or "status"
-- Returns {kind, value, place, now, capacity, batch, lease, open, mode,
--          paused, rate, drawn, cohort, active}; kind is "none" (no such waiting room),
--          "admitted" (value: lease expiry ms), "queued" (value: rank) or
--          "absent" (status of someone not in line).
local now = nowms()
local user = ARGV[1]

local cfg = redis.call('HMGET', KEYS[4], 'cap', 'batch', 'lease', 'open', 'mode', 'paused')
if not cfg[1] then
  return {'none'}
end
local st = redis.call('HMGET', KEYS[5], 'rate', 'drawn', 'cmax', 'old')
-- The tick marks (state 'old') a room whose old-layout queue holds people.
local legacy = st[4] == '1'
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now)
-- The live leases: with places free, the head of the line goes in at the
-- next tick whatever the measured rate says.
local active = redis.call('ZCARD', KEYS[2])
local function answer(kind, value, place)
  return {kind, value, place, now, cfg[1], cfg[2], cfg[3], cfg[4] or '0', cfg[5] or 'fifo',
          cfg[6] or '0', st[1] or '0', st[2] or '0', st[3] or '0', active}
end

local lease = redis.call('ZSCORE', KEYS[2], user)
if lease then
  return answer('admitted', lease, '0')
end

local place
local score = redis.call('ZSCORE', KEYS[1], user)
if not score and legacy then
  -- Queued by a binary of the old layout: the place moves over.
  local old = redis.call('ZSCORE', KEYS[6], user)
  if old then
    adopt(KEYS[6], KEYS[7], KEYS[1], {user}, {old}, math.floor(now / 1000), math.huge)
    score = redis.call('ZSCORE', KEYS[1], user)
  end
end
if score then
  place = placeOf(score)
else
  if ARGV[2] ~= 'join' then
    return answer('absent', 0, '0')
  end
  place = redis.call('INCR', KEYS[3])
  if place > MAXPLACE then
    return redis.error_reply('waitingroom: sequence exhausted')
  end
  local open = tonumber(cfg[4]) or 0
  -- Everyone who joins before the open time belongs to the cohort a lottery
  -- shuffles at opening; the cohort closes once the draw happened.
  if open > 0 and now < open and st[2] ~= '1' then
    redis.call('HSET', KEYS[5], 'cmax', place)
    st[3] = tostring(place)
  end
end
local beat = pack(place, math.floor(now / 1000))
if beat ~= score then
  redis.call('ZADD', KEYS[1], beat, user)
end
local rank = redis.call('ZRANK', KEYS[1], user)
if legacy then
  rank = rank + legacyAhead(KEYS[6], place)
end
return answer('queued', rank, fmt(place))
