-- Applies a batch of pings (and closes) of one shard to its lifecycle
-- indexes: live sessions by deadline, closed sessions by the end of their
-- grace. Consumers of one group may apply entries out of stream order, and
-- a gateway appends its plain pings in batches (after a close it wrote at
-- once), so:
--   * a close always ends a session's pings: it moves the session to the
--     closing index over any ping, whatever their positions, and no ping
--     applies after it (a session id is never reused, so nothing of the
--     session can follow its close);
--   * among entries of one kind, older ones are ignored: a deadline only
--     moves later (GT), and the TTL is the same for every entry of a kind.
-- A plain ping of a live session is one ZADD; only a session missing from
-- the live index (its first ping was lost, or it timed out already) costs
-- a look at the closing index.
--
-- KEYS: 1 deadlines zset (live), 2 closing zset
-- ARGV: groups of 4: member, position (ms*1000+seq), ttl ms, kind (p|c)
-- Returns the number of entries applied.
local applied = 0
for i = 1, #ARGV, 4 do
  local m, pos, ttl, kind = ARGV[i], tonumber(ARGV[i + 1]), tonumber(ARGV[i + 2]), ARGV[i + 3]
  local deadline = math.floor(pos / 1000) + ttl
  if kind == 'c' then
    redis.call('ZREM', KEYS[1], m)
    applied = applied + redis.call('ZADD', KEYS[2], 'GT', 'CH', deadline, m)
  elseif redis.call('ZADD', KEYS[1], 'GT', deadline, m) == 1 then
    -- Not live before this ping: unless it closed, it is live now.
    if redis.call('ZSCORE', KEYS[2], m) then
      redis.call('ZREM', KEYS[1], m)
    else
      applied = applied + 1
    end
  else
    applied = applied + 1
  end
end
return applied
