-- All-or-nothing seat hints for one cart. The hints only turn obvious
-- contention into a cheap rejection: PostgreSQL still decides ownership.
-- A hint is "<owner>|<claim>": the reservation it was taken for, and the
-- request that took it (its user and idempotency key). A retry of the same
-- request, concurrent or after its commit, is not refused by its own hints
-- and leaves them as they are: PostgreSQL answers it (a replay).
-- KEYS: the cart's hint keys (one event, one hash tag).
-- ARGV[1]: owner (the reservation id); ARGV[2]: claim; ARGV[3]: ttl in ms.
-- Returns 0 on success, or the 1-based index of the first seat hinted for
-- another request (no hint is written then).
local mine = '|' .. ARGV[2]
for i, key in ipairs(KEYS) do
  local v = redis.call('GET', key)
  if v and string.sub(v, -#mine) ~= mine then
    return i
  end
end
local value = ARGV[1] .. mine
for _, key in ipairs(KEYS) do
  redis.call('SET', key, value, 'PX', ARGV[3], 'NX')
end
return 0
