-- Owner-checked release: a late release of an old reservation never deletes
-- the hint of the next buyer of the same seat.
-- A hint is "<owner>|<claim>" (see hint_hold.lua); a bare "<owner>" is one
-- written before claims existed.
-- KEYS: hint keys of one event; ARGV[1]: owner (the reservation id).
local prefix = ARGV[1] .. '|'
local n = 0
for _, key in ipairs(KEYS) do
  local v = redis.call('GET', key)
  if v == ARGV[1] or (v and string.sub(v, 1, #prefix) == prefix) then
    redis.call('DEL', key)
    n = n + 1
  end
end
return n
