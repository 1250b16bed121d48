-- All-or-nothing seat hints for one cart. The hints only turn obvious
-- contention into a cheap rejection: PostgreSQL still decides ownership.
-- KEYS: the cart's hint keys (one event, one hash tag).
-- ARGV[1]: owner (the reservation id); ARGV[2]: ttl in milliseconds.
-- Returns 0 on success, or the 1-based index of the first seat hinted by
-- someone else (no hint is written then).
for i, key in ipairs(KEYS) do
  local owner = redis.call('GET', key)
  if owner and owner ~= ARGV[1] then
    return i
  end
end
for _, key in ipairs(KEYS) do
  redis.call('SET', key, ARGV[1], 'PX', ARGV[2])
end
return 0
