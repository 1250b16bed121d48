-- The first sign of life of a session that has just opened, written
-- straight to its shard's deadline index instead of through the pings
-- stream (an append, a consumer's read, this shard's apply script and an
-- acknowledgement). Nothing of the session can come before it: its id is
-- new, and its pings and close are appended only after its open returned.
-- So it is recorded at position 0, below every entry of the stream that
-- follows, and only where nothing is recorded yet.
--
-- KEYS: 1 deadlines zset, 2 last-seen hash (as ping_apply.lua)
-- ARGV: 1 member, 2 ttl ms
-- Returns {1} when recorded, {0} when the member already had a record.
if redis.call('HSETNX', KEYS[2], ARGV[1], '0|p') == 0 then
  return {0}
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('ZADD', KEYS[1], now + tonumber(ARGV[2]), ARGV[1])
return {1}
