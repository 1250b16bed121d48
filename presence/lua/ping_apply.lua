-- Applies a batch of pings (and closes) of one shard to its deadline index.
-- Consumers of one group may apply entries out of stream order, so each
-- member keeps the position of the latest entry applied and older ones are
-- ignored: a close read after a later ping cannot shorten a live session, and
-- a ping read after a close cannot stretch a closed one.
--
-- KEYS: 1 deadlines zset, 2 last-seen hash
-- ARGV: groups of 4: member, position (ms*1000+seq), ttl ms, kind (p|c)
-- Returns the number of entries applied.
local applied = 0
for i = 1, #ARGV, 4 do
  local m, pos, ttl, kind = ARGV[i], tonumber(ARGV[i + 1]), tonumber(ARGV[i + 2]), ARGV[i + 3]
  local prev = redis.call('HGET', KEYS[2], m)
  local prevPos = -1
  if prev then
    prevPos = tonumber(string.sub(prev, 1, string.find(prev, '|', 1, true) - 1))
  end
  if pos > prevPos then
    redis.call('HSET', KEYS[2], m, string.format('%d|%s', pos, kind))
    redis.call('ZADD', KEYS[1], math.floor(pos / 1000) + ttl, m)
    applied = applied + 1
  end
end
return applied
