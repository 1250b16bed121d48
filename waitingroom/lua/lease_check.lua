-- Is there a live lease for the user? Read on Redis's clock.
-- KEYS: 1 leases; ARGV: 1 user
-- Returns the lease expiry in ms, or 0.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local exp = tonumber(redis.call('ZSCORE', KEYS[1], ARGV[1]))
if exp and exp > now then
  return exp
end
return 0
