-- Owner-checked extension: a hold that committed keeps its hints for its
-- own time; a hint already lapsed or taken by another buyer is left alone.
-- A hint is "<owner>|<claim>" (see hint_hold.lua).
-- KEYS: hint keys of one event; ARGV[1]: owner (the reservation id);
-- ARGV[2]: ttl in milliseconds. Returns how many hints were extended.
local prefix = ARGV[1] .. '|'
local n = 0
for _, key in ipairs(KEYS) do
  local v = redis.call('GET', key)
  if v and string.sub(v, 1, #prefix) == prefix then
    redis.call('PEXPIRE', key, ARGV[2])
    n = n + 1
  end
end
return n
