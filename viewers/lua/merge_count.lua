-- Count a hotel's window together with peer regions' registers.
-- KEYS: the window's HyperLogLog keys, then one scratch key per peer blob
-- (all in the hotel's slot). ARGV: the peer blobs.
-- Returns {count, merged}: merged is 0 when a blob was not a valid
-- HyperLogLog and the count is local only.
local nblobs = #ARGV
local nsrc = #KEYS - nblobs
for i = 1, nblobs do
	redis.call('SET', KEYS[nsrc + i], ARGV[i], 'PX', 10000)
end
local ok, n = pcall(redis.call, 'PFCOUNT', unpack(KEYS))
for i = 1, nblobs do
	redis.call('DEL', KEYS[nsrc + i])
end
if ok then
	return {n, 1}
end
local src = {}
for i = 1, nsrc do
	src[i] = KEYS[i]
end
return {redis.call('PFCOUNT', unpack(src)), 0}
