-- Fixed-window counter: KEYS[1] counter; ARGV[1] window in milliseconds.
-- Returns the count in the current window and the window's remaining ms.
local n = redis.call('INCR', KEYS[1])
if n == 1 then
  redis.call('PEXPIRE', KEYS[1], ARGV[1])
end
return {n, redis.call('PTTL', KEYS[1])}
