-- Claim the gateways to reap: those whose lease lapsed move from the
-- leases to the reaping set, and are marked reaped (so a late renewal
-- learns its sessions were ended); claims older than ARGV[1] ms (a worker
-- died mid-reap) are taken again. Marks older than an hour are dropped.
-- KEYS[1]: leases zset; KEYS[2]: reaping zset (gateway id -> claim ms);
-- KEYS[3]: reaped zset (gateway id -> ms). Returns the gateway ids claimed.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local out = {}
for _, gw in ipairs(redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', '(' .. string.format('%d', now), 'LIMIT', 0, 100)) do
  redis.call('ZREM', KEYS[1], gw)
  redis.call('ZADD', KEYS[2], now, gw)
  redis.call('ZADD', KEYS[3], now, gw)
  out[#out + 1] = gw
end
local stale = now - tonumber(ARGV[1])
for _, gw in ipairs(redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', '(' .. string.format('%d', stale), 'LIMIT', 0, 100)) do
  redis.call('ZADD', KEYS[2], now, gw)
  out[#out + 1] = gw
end
redis.call('ZREMRANGEBYSCORE', KEYS[3], '-inf', '(' .. string.format('%d', now - 3600000))
return out
