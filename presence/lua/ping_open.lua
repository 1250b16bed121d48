-- The first sign of life of a session that has just opened, written
-- straight to its shard's deadline index instead of through the pings
-- stream (an append, a consumer's read, this shard's apply script and an
-- acknowledgement). Nothing of the session can come before it: its id is
-- new, and its pings and close are appended only after its open returned.
-- So it is recorded only where nothing is recorded yet, and every later
-- ping (a later deadline) or close overrides it.
--
-- KEYS: 1 deadlines zset, 2 closing zset (as ping_apply.lua)
-- ARGV: 1 member, 2 ttl ms
-- Returns {1} when recorded, {0} when the member already had a record.
if redis.call('ZSCORE', KEYS[2], ARGV[1]) then
  return {0}
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
return {redis.call('ZADD', KEYS[1], 'NX', now + tonumber(ARGV[2]), ARGV[1])}
