-- Move a live lease's expiry to ARGV[2] ms from now. A lease that expired
-- (or never existed) is not revived: the user has to queue again.
-- KEYS: 1 leases; ARGV: 1 user, 2 duration ms
-- Returns the new expiry in ms, or 0 when there was no live lease.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local exp = tonumber(redis.call('ZSCORE', KEYS[1], ARGV[1]))
if not exp or exp <= now then
  return 0
end
local until_ = now + tonumber(ARGV[2])
redis.call('ZADD', KEYS[1], 'XX', until_, ARGV[1])
return until_
