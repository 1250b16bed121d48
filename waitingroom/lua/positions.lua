-- The places of many users at once, for the sockets one process holds:
-- refresh each queued user's heartbeat (the socket is alive) and answer its
-- rank, or its lease when admitted.
--
-- KEYS: 1 line, 2 leases, 3 settings, 4 state, 5 old-layout queue,
--       6 old-layout heartbeats (entry.lua)
-- ARGV: users
-- Returns {now, capacity, batch, lease, open, mode, paused, rate, drawn, cohort,
--          active, then per user: kind, value, place}; kind 1 queued (value: rank),
--          2 admitted (value: lease expiry ms), 0 not in line. An empty
--          reply means the waiting room does not exist.
local now = nowms()
local cfg = redis.call('HMGET', KEYS[3], 'cap', 'batch', 'lease', 'open', 'mode', 'paused', 'hbt')
if not cfg[1] then
  return {}
end
local st = redis.call('HMGET', KEYS[4], 'rate', 'drawn', 'cmax', 'old')
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now)
local out = {now, cfg[1], cfg[2], cfg[3], cfg[4] or '0', cfg[5] or 'fifo', cfg[6] or '0',
             st[1] or '0', st[2] or '0', st[3] or '0', redis.call('ZCARD', KEYS[2])}
-- One read of leases and entries for all, one write of the heartbeats due;
-- only the ranks are looked up one by one. A heartbeat younger than a
-- quarter of the timeout is not rewritten: it would change nothing the
-- sweep can see, and the write is the costly part in a long line.
local leases = redis.call('ZMSCORE', KEYS[2], unpack(ARGV))
local scores = redis.call('ZMSCORE', KEYS[1], unpack(ARGV))
local sec = math.floor(now / 1000)
-- Sockets of people queued by a binary of the old layout: their places
-- move over (the tick marks, as state 'old', a room whose old-layout queue
-- holds people).
local legacy = st[4] == '1'
if legacy then
  local olds = redis.call('ZMSCORE', KEYS[5], unpack(ARGV))
  local users, found = {}, {}
  for i, user in ipairs(ARGV) do
    if not leases[i] and not scores[i] and olds[i] then
      users[#users + 1] = user
      found[#found + 1] = olds[i]
    end
  end
  if #users > 0 then
    adopt(KEYS[5], KEYS[6], KEYS[1], users, found, sec, math.huge)
    scores = redis.call('ZMSCORE', KEYS[1], unpack(ARGV))
  end
end
local due = tonumber(cfg[7]) / 4
local beats = {}
for i, user in ipairs(ARGV) do
  if leases[i] then
    out[#out + 1] = 2
    out[#out + 1] = leases[i]
    out[#out + 1] = '0'
  elseif scores[i] then
    local place = placeOf(scores[i])
    if silence(scores[i], sec) >= due then
      beats[#beats + 1] = pack(place, sec)
      beats[#beats + 1] = user
    end
    out[#out + 1] = 1
    local rank = redis.call('ZRANK', KEYS[1], user)
    if legacy then
      rank = rank + legacyAhead(KEYS[5], place)
    end
    out[#out + 1] = rank
    out[#out + 1] = fmt(place)
  else
    out[#out + 1] = 0
    out[#out + 1] = 0
    out[#out + 1] = '0'
  end
end
zaddAll(KEYS[1], beats)
return out
