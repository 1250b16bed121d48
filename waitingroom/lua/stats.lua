-- Live statistics of one waiting room, read atomically.
--
-- KEYS: 1 line, 2 leases, 3 state, 4 tick log, 5 join-time index, 6 settings,
--       7 old-layout queue (entry.lua: it empties during an upgrade)
-- ARGV: 1 span of the per-minute figures in ms
-- Returns {now, queued, active, admitted in span, abandoned in span,
--          oldest wait ms (-1: empty line), rate, drawn, last tick ms}, or
--          {} when the waiting room does not exist.
local now = nowms()
if redis.call('EXISTS', KEYS[6]) == 0 then
  return {}
end
local span = tonumber(ARGV[1])
local admitted, abandoned = 0, 0
for _, e in ipairs(redis.call('ZRANGEBYSCORE', KEYS[4], now - span, '+inf')) do
  local a, d = string.match(e, '^%d+:(%d+):(%d+)$')
  admitted = admitted + tonumber(a)
  abandoned = abandoned + tonumber(d)
end
local oldest = -1
local head = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
local place = head[2] and placeOf(head[2])
local old = redis.call('ZRANGE', KEYS[7], 0, 0, 'WITHSCORES')
if old[2] and (not place or legacyPlace(old[2]) < place) then
  place = legacyPlace(old[2])
end
if place then
  local joined = now
  if place > 0 then
    local rec = redis.call('ZRANGEBYSCORE', KEYS[5], place, '+inf', 'LIMIT', 0, 1)
    joined = tonumber(rec[1]) or now
  else
    joined = tonumber(redis.call('HGET', KEYS[6], 'open')) or now
  end
  oldest = math.max(0, now - joined)
end
local st = redis.call('HMGET', KEYS[3], 'rate', 'drawn', 'lt')
return {now, redis.call('ZCARD', KEYS[1]) + redis.call('ZCARD', KEYS[7]), redis.call('ZCOUNT', KEYS[2], '(' .. now, '+inf'),
        admitted, abandoned, oldest, st[1] or '0', st[2] or '0', st[3] or '0'}
