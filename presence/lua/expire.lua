-- The scheduler step of one shard: sessions whose deadline passed become
-- inactive events. Only deadlines before the watermark count: every ping
-- written before it has been applied, so a deadline there is final and not
-- an artefact of consumer lag. Checking, removing and emitting happen in one
-- step, so schedulers running in several workers emit each session once.
--
-- KEYS: 1 deadlines zset, 2 last-seen hash, 3 events stream
-- ARGV: 1 watermark ms, 2 batch limit, 3 events stream max length
-- Returns {sessions timed out, sessions ended after their close grace}.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local cutoff = math.min(now, tonumber(ARGV[1]))
local due = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', '(' .. string.format('%d', cutoff),
  'WITHSCORES', 'LIMIT', 0, tonumber(ARGV[2]))
local timeouts, closes = 0, 0
for i = 1, #due, 2 do
  local m, deadline = due[i], due[i + 1]
  local seen = redis.call('HGET', KEYS[2], m)
  local reason = 'timeout'
  if seen and string.sub(seen, -1) == 'c' then
    reason = 'closed'
    closes = closes + 1
  else
    timeouts = timeouts + 1
  end
  redis.call('ZREM', KEYS[1], m)
  redis.call('HDEL', KEYS[2], m)
  redis.call('XADD', KEYS[3], 'MAXLEN', '~', ARGV[3], '*', 'm', m, 'r', reason, 'd', deadline)
end
return {timeouts, closes}
