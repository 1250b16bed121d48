-- A gateway's liveness lease: one sorted set of gateway id -> expiry (ms,
-- Redis time), so a worker can find lapsed gateways in one read.
-- KEYS[1]: leases zset; KEYS[2]: reaped zset (gateway id -> reap ms).
-- ARGV[1]: gateway id; ARGV[2]: ttl ms; ARGV[3]: "register", "renew" or
-- "release".
-- Returns 1; or, for a renewal that finds no lease, 0 when a worker reaped
-- the gateway (its sessions were ended: it must not go on as if alive),
-- and 2 when the lease is simply gone (Redis restarted empty: the lease is
-- taken again, and the lost sessions end one by one as they are used).
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local mode = ARGV[3]
if mode == 'release' then
  -- Lapsed at once: the next reap ends whatever sessions are left.
  redis.call('ZADD', KEYS[1], 0, ARGV[1])
  return 1
end
local result = 1
if mode == 'renew' and not redis.call('ZSCORE', KEYS[1], ARGV[1]) then
  if redis.call('ZSCORE', KEYS[2], ARGV[1]) then
    redis.call('ZREM', KEYS[2], ARGV[1])
    return 0
  end
  result = 2
end
redis.call('ZADD', KEYS[1], now + tonumber(ARGV[2]), ARGV[1])
return result
