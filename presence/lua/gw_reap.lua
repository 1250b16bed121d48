-- End, in one shard, the sessions of a gateway whose lease lapsed: each
-- becomes an inactive event (reason "gateway") for the cleanup consumers,
-- which close it as they close timed-out ones. Sessions of the same users
-- on other gateways are untouched, so nobody connected elsewhere flaps.
-- KEYS: 1 the gateway's session set in this shard, 2 deadlines zset,
-- 3 closing zset, 4 events stream. ARGV[1]: events stream max length.
-- Returns the number of sessions ended.
local members = redis.call('SMEMBERS', KEYS[1])
for _, m in ipairs(members) do
  redis.call('ZREM', KEYS[2], m)
  redis.call('ZREM', KEYS[3], m)
  redis.call('XADD', KEYS[4], 'MAXLEN', '~', ARGV[1], '*', 'm', m, 'r', 'gateway', 'd', 0)
end
redis.call('DEL', KEYS[1])
return #members
