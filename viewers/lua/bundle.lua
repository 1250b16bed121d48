-- The raw registers of a hotel's window: the union of its keys, merged into
-- a scratch key that is read and dropped at once.
-- KEYS[1] scratch key, KEYS[2..] the window's HyperLogLog keys.
redis.call('PFMERGE', KEYS[1], unpack(KEYS, 2))
local v = redis.call('GET', KEYS[1])
redis.call('DEL', KEYS[1])
return v
