-- Global token bucket of one IP prefix, debited by a batch of heartbeats
-- already admitted by an ingest process.
-- KEYS[1] bucket hash {t = tokens, ts = last refill in ms}
-- ARGV[1] rate (tokens/s), ARGV[2] burst, ARGV[3] tokens to take
-- Returns the tokens left in thousandths; negative means in debt, and the
-- prefix should be refused until the debt is paid back.
local rate = tonumber(ARGV[1])
local burst = tonumber(ARGV[2])
local take = tonumber(ARGV[3])
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local state = redis.call('HMGET', KEYS[1], 't', 'ts')
local tokens = tonumber(state[1]) or burst
local ts = tonumber(state[2]) or now
if now > ts then
	tokens = math.min(burst, tokens + (now - ts) * rate / 1000)
end
tokens = math.max(-burst, tokens - take)
redis.call('HSET', KEYS[1], 't', tostring(tokens), 'ts', tostring(now))
redis.call('PEXPIRE', KEYS[1], math.ceil(2 * burst / rate * 1000) + 1000)
return math.floor(tokens * 1000)
