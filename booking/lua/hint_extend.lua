-- Owner-checked extension: a hold that committed keeps its hints for its
-- own time; a hint already lapsed or taken by another buyer is left alone.
-- KEYS: hint keys of one event; ARGV[1]: owner (the reservation id);
-- ARGV[2]: ttl in milliseconds. Returns how many hints were extended.
local n = 0
for _, key in ipairs(KEYS) do
  if redis.call('GET', key) == ARGV[1] then
    redis.call('PEXPIRE', key, ARGV[2])
    n = n + 1
  end
end
return n
