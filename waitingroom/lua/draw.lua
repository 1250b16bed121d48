-- One step of a lottery draw at opening: the entries that joined before the
-- open time (positive scores up to the cohort's last sequence) each get a
-- random key from ARGV, negative so the whole cohort sorts ahead of later
-- joiners, who stay first in, first out behind it. An entry leaves the
-- cohort's score range when it is drawn, so nobody is drawn twice; the draw
-- ends (and never happens again) when a step finds fewer entries than keys.
--
-- KEYS: 1 queue, 2 settings, 3 state
-- ARGV: random keys, each in [1, 2^52]
-- Returns {drawn in this step, done (1/0)}.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local cfg = redis.call('HMGET', KEYS[2], 'open', 'mode')
local st = redis.call('HMGET', KEYS[3], 'drawn', 'cmax')
local open = tonumber(cfg[1]) or 0
if st[1] == '1' or cfg[2] ~= 'lottery' or open == 0 or now < open then
  return {0, 1}
end
local cmax = tonumber(st[2]) or 0
local members = {}
if cmax > 0 then
  members = redis.call('ZRANGEBYSCORE', KEYS[1], 1, cmax, 'LIMIT', 0, #ARGV)
end
for i, user in ipairs(members) do
  redis.call('ZADD', KEYS[1], -tonumber(ARGV[i]), user)
end
if #members < #ARGV then
  redis.call('HSET', KEYS[3], 'drawn', 1, 'drawnAt', now)
  return {#members, 1}
end
return {#members, 0}
