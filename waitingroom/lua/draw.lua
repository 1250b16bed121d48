-- One step of a lottery draw at opening: the entries that joined before the
-- open time (places 1 up to the cohort's last sequence) each get a random
-- key from ARGV as their place, negative so the whole cohort sorts ahead of
-- later joiners, who stay first in, first out behind it; the heartbeat is
-- kept. An entry leaves the cohort's range when it is drawn, so nobody is
-- drawn twice; the draw ends (and never happens again) when a step finds
-- fewer entries than keys. Two equal keys (rare among 2^32) tie, and their
-- entries sort by heartbeat and id: still in a random place each.
--
-- While the old layout's queue (entry.lua) still holds people, the draw
-- waits (answers done without drawing): the tick moves them into the line
-- first, so every cohort entry is drawn.
--
-- KEYS: 1 line, 2 settings, 3 state, 4 old-layout queue
-- ARGV: random keys, each in [1, 2^32 - 1]
-- Returns {drawn in this step, done (1/0)}.
local now = nowms()
local cfg = redis.call('HMGET', KEYS[2], 'open', 'mode')
local st = redis.call('HMGET', KEYS[3], 'drawn', 'cmax')
local open = tonumber(cfg[1]) or 0
if st[1] == '1' or cfg[2] ~= 'lottery' or open == 0 or now < open then
  return {0, 1}
end
if redis.call('EXISTS', KEYS[4]) == 1 then
  return {0, 1}
end
local cmax = tonumber(st[2]) or 0
local entries = {}
if cmax > 0 then
  local lo, hi = placeRange(1, cmax)
  entries = redis.call('ZRANGEBYSCORE', KEYS[1], lo, hi, 'WITHSCORES', 'LIMIT', 0, #ARGV)
end
local drawn = {}
for i = 1, #entries, 2 do
  local key = tonumber(ARGV[(i + 1) / 2])
  drawn[#drawn + 1] = pack(-key, tonumber(entries[i + 1]))
  drawn[#drawn + 1] = entries[i]
end
zaddAll(KEYS[1], drawn)
local n = #entries / 2
if n < #ARGV then
  redis.call('HSET', KEYS[3], 'drawn', 1, 'drawnAt', now)
  return {n, 1}
end
return {n, 0}
