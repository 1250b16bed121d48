-- Record the rooms of a user's latest token, and say which rooms the user
-- left, so visibility granted through them can be withdrawn.
-- KEYS[1]: the user's rooms set. ARGV[1]: ttl in milliseconds; ARGV[2..]:
-- the rooms now. Returns the rooms of the previous token not in this one.
local old = redis.call('SMEMBERS', KEYS[1])
redis.call('DEL', KEYS[1])
local now = {}
for i = 2, #ARGV do
  now[ARGV[i]] = true
  redis.call('SADD', KEYS[1], ARGV[i])
end
if #ARGV > 1 then
  redis.call('PEXPIRE', KEYS[1], ARGV[1])
end
local left = {}
for _, r in ipairs(old) do
  if not now[r] then
    left[#left + 1] = r
  end
end
return left
