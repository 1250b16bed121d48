-- What a hold that took its hints but did not commit leaves undone, in one
-- call (lease_lib.lua and hint_lib.lua come first): its hints dropped
-- (owner-checked), the lease put back where it was before the gate moved
-- it (only if nothing moved it since), and the seats PostgreSQL said were
-- held hinted again for their holder, so that the next buyer wanting them
-- is refused by Redis, not by another round trip to PostgreSQL.
-- KEYS: 1 the event's leases, 2.. the cart's hint keys.
-- ARGV: 1 user, 2 hint owner (the reservation id), 3 the lease's expiry
--       before the gate, 4 the expiry the gate set (0: it set none),
--       4+i: "<holder>:<ms>" to hint the cart's i-th seat for its holder
--       for ms, or "" to leave it.
-- Returns the number of hints dropped.
local dropped = hint_drop(KEYS, 2, ARGV[2])
local set = tonumber(ARGV[4])
if set > 0 and tonumber(redis.call('ZSCORE', KEYS[1], ARGV[1])) == set then
  redis.call('ZADD', KEYS[1], 'XX', ARGV[3], ARGV[1])
end
for i = 2, #KEYS do
  local holder, ms = string.match(ARGV[3 + i] or '', '^(.+):(%d+)$')
  if holder then
    redis.call('SET', KEYS[i], holder .. '|', 'PX', ms, 'NX')
  end
end
return dropped
