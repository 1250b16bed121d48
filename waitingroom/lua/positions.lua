-- The places of many users at once, for the sockets one process holds:
-- refresh each queued user's heartbeat (the socket is alive) and answer its
-- rank, or its lease when admitted.
--
-- KEYS: 1 queue, 2 heartbeats, 3 leases, 4 settings, 5 state
-- ARGV: users
-- Returns {now, capacity, batch, lease, open, mode, paused, rate, drawn, cohort,
--          then per user: kind, value, score}; kind 1 queued (value: rank),
--          2 admitted (value: lease expiry ms), 0 not in line. An empty
--          reply means the waiting room does not exist.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local cfg = redis.call('HMGET', KEYS[4], 'cap', 'batch', 'lease', 'open', 'mode', 'paused')
if not cfg[1] then
  return {}
end
local st = redis.call('HMGET', KEYS[5], 'rate', 'drawn', 'cmax')
redis.call('ZREMRANGEBYSCORE', KEYS[3], '-inf', now)
local out = {now, cfg[1], cfg[2], cfg[3], cfg[4] or '0', cfg[5] or 'fifo', cfg[6] or '0',
             st[1] or '0', st[2] or '0', st[3] or '0'}
for _, user in ipairs(ARGV) do
  local lease = redis.call('ZSCORE', KEYS[3], user)
  if lease then
    out[#out + 1] = 2
    out[#out + 1] = lease
    out[#out + 1] = '0'
  else
    local score = redis.call('ZSCORE', KEYS[1], user)
    if score then
      redis.call('ZADD', KEYS[2], now, user)
      out[#out + 1] = 1
      out[#out + 1] = redis.call('ZRANK', KEYS[1], user)
      out[#out + 1] = score
    else
      out[#out + 1] = 0
      out[#out + 1] = 0
      out[#out + 1] = '0'
    end
  end
end
return out
