-- Take or renew a lease: succeeds when the lease is free or already ours.
-- KEYS[1] lease key; ARGV[1] owner token; ARGV[2] ttl in milliseconds.
-- Returns 1 when held by ARGV[1] afterwards, 0 otherwise.
local holder = redis.call('GET', KEYS[1])
if holder == false or holder == ARGV[1] then
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
  return 1
end
return 0
