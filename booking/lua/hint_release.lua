-- Owner-checked release: a late release of an old reservation never deletes
-- the hint of the next buyer of the same seat.
-- KEYS: hint keys of one event; ARGV[1]: owner (the reservation id).
local n = 0
for _, key in ipairs(KEYS) do
  if redis.call('GET', key) == ARGV[1] then
    redis.call('DEL', key)
    n = n + 1
  end
end
return n
