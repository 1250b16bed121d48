-- Applies a batch of pings (and closes) of one shard to its deadline index.
-- Consumers of one group may apply entries out of stream order, and a
-- gateway appends its plain pings in batches (after a close it wrote at
-- once), so each member keeps the position and kind of the latest entry
-- applied, and:
--   * a close always ends a session's pings: it applies over any ping,
--     whatever their positions, and no ping applies after it (a session
--     id is never reused, so nothing of the session can follow its close);
--   * among entries of one kind, older ones are ignored.
--
-- KEYS: 1 deadlines zset, 2 last-seen hash
-- ARGV: groups of 4: member, position (ms*1000+seq), ttl ms, kind (p|c)
-- Returns the number of entries applied.
local applied = 0
for i = 1, #ARGV, 4 do
  local m, pos, ttl, kind = ARGV[i], tonumber(ARGV[i + 1]), tonumber(ARGV[i + 2]), ARGV[i + 3]
  local prev = redis.call('HGET', KEYS[2], m)
  local apply = true
  if prev then
    local sep = string.find(prev, '|', 1, true)
    local prevPos, prevKind = tonumber(string.sub(prev, 1, sep - 1)), string.sub(prev, sep + 1)
    if prevKind == kind then
      apply = pos > prevPos
    else
      apply = kind == 'c'
    end
  end
  if apply then
    redis.call('HSET', KEYS[2], m, string.format('%d|%s', pos, kind))
    redis.call('ZADD', KEYS[1], math.floor(pos / 1000) + ttl, m)
    applied = applied + 1
  end
end
return applied
