-- Join the line or read one's place in it, in one atomic step on Redis's own
-- clock: prune expired leases, answer "admitted" to a live lease, keep an
-- existing place (rejoining never sends anyone back), take a sequence number
-- only for a new entry, refresh the heartbeat, and answer the rank.
--
-- KEYS: 1 queue, 2 heartbeats, 3 leases, 4 sequence, 5 settings, 6 state
-- ARGV: 1 user, 2 "join" or "status"
-- Returns {kind, value, score, now, capacity, batch, lease, open, mode,
--          paused, rate, drawn, cohort}; kind is "none" (no such waiting room),
--          "admitted" (value: lease expiry ms), "queued" (value: rank) or
--          "absent" (status of someone not in line).
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local user = ARGV[1]

local cfg = redis.call('HMGET', KEYS[5], 'cap', 'batch', 'lease', 'open', 'mode', 'paused')
if not cfg[1] then
  return {'none'}
end
local st = redis.call('HMGET', KEYS[6], 'rate', 'drawn', 'cmax')
local function answer(kind, value, score)
  return {kind, value, score, now, cfg[1], cfg[2], cfg[3], cfg[4] or '0', cfg[5] or 'fifo',
          cfg[6] or '0', st[1] or '0', st[2] or '0', st[3] or '0'}
end

redis.call('ZREMRANGEBYSCORE', KEYS[3], '-inf', now)
local lease = redis.call('ZSCORE', KEYS[3], user)
if lease then
  return answer('admitted', lease, '0')
end

local score = redis.call('ZSCORE', KEYS[1], user)
if not score then
  if ARGV[2] ~= 'join' then
    return answer('absent', 0, '0')
  end
  local seq = redis.call('INCR', KEYS[4])
  local open = tonumber(cfg[4]) or 0
  -- Everyone who joins before the open time belongs to the cohort a lottery
  -- shuffles at opening; the cohort closes once the draw happened.
  if open > 0 and now < open and st[2] ~= '1' then
    redis.call('HSET', KEYS[6], 'cmax', seq)
    st[3] = tostring(seq)
  end
  redis.call('ZADD', KEYS[1], seq, user)
  score = tostring(seq)
end
redis.call('ZADD', KEYS[2], now, user)
return answer('queued', redis.call('ZRANK', KEYS[1], user), score)
