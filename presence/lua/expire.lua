-- The scheduler step of one shard: live sessions whose deadline passed
-- become "timeout" events, closed sessions whose grace passed "closed"
-- events. Only deadlines before the watermark count: every ping written
-- before it has been applied, so a deadline there is final and not an
-- artefact of consumer lag. Checking, removing and emitting happen in one
-- step, so schedulers running in several workers emit each session once.
--
-- KEYS: 1 deadlines zset (live), 2 closing zset, 3 events stream
-- ARGV: 1 watermark ms, 2 batch limit, 3 events stream max length
-- Returns {sessions timed out, sessions ended after their close grace,
-- sessions still tracked}.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local cutoff = '(' .. string.format('%d', math.min(now, tonumber(ARGV[1])))
local limit = tonumber(ARGV[2])
local ended = {0, 0}
for k, reason in ipairs({'timeout', 'closed'}) do
  local due = redis.call('ZRANGEBYSCORE', KEYS[k], '-inf', cutoff, 'WITHSCORES', 'LIMIT', 0, limit)
  for i = 1, #due, 2 do
    redis.call('ZREM', KEYS[k], due[i])
    redis.call('XADD', KEYS[3], 'MAXLEN', '~', ARGV[3], '*', 'm', due[i], 'r', reason, 'd', due[i + 1])
  end
  ended[k] = #due / 2
  limit = limit - ended[k]
  if limit <= 0 then
    break
  end
end
return {ended[1], ended[2], redis.call('ZCARD', KEYS[1]) + redis.call('ZCARD', KEYS[2])}
