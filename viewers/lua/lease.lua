-- Take or renew a lease. KEYS[1] lease, ARGV[1] owner, ARGV[2] ttl in ms.
-- Returns 1 when ARGV[1] holds the lease afterwards.
local cur = redis.call('GET', KEYS[1])
if cur == false or cur == ARGV[1] then
	redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
	return 1
end
return 0
