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
local cfg = redis.call('HMGET', KEYS[4], 'cap', 'batch', 'lease', 'open', 'mode', 'paused', 'hbt')
if not cfg[1] then
  return {}
end
local st = redis.call('HMGET', KEYS[5], 'rate', 'drawn', 'cmax')
redis.call('ZREMRANGEBYSCORE', KEYS[3], '-inf', now)
local out = {now, cfg[1], cfg[2], cfg[3], cfg[4] or '0', cfg[5] or 'fifo', cfg[6] or '0',
             st[1] or '0', st[2] or '0', st[3] or '0'}
-- One read of leases, places and heartbeats for all, one heartbeat write;
-- only the ranks are looked up one by one. A heartbeat younger than a
-- quarter of the timeout is not rewritten: it would change nothing the
-- tick can see, and the write is the costly part in a long line.
local leases = redis.call('ZMSCORE', KEYS[3], unpack(ARGV))
local scores = redis.call('ZMSCORE', KEYS[1], unpack(ARGV))
local seen = redis.call('ZMSCORE', KEYS[2], unpack(ARGV))
local stale = now - tonumber(cfg[7]) * 250
local beats = {}
for i, user in ipairs(ARGV) do
  if leases[i] then
    out[#out + 1] = 2
    out[#out + 1] = leases[i]
    out[#out + 1] = '0'
  elseif scores[i] then
    if not seen[i] or tonumber(seen[i]) < stale then
      beats[#beats + 1] = now
      beats[#beats + 1] = user
    end
    out[#out + 1] = 1
    out[#out + 1] = redis.call('ZRANK', KEYS[1], user)
    out[#out + 1] = scores[i]
  else
    out[#out + 1] = 0
    out[#out + 1] = 0
    out[#out + 1] = '0'
  end
end
if #beats > 0 then
  redis.call('ZADD', KEYS[2], unpack(beats))
end
return out
