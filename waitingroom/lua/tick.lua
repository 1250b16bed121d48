-- One admission tick of one event, atomic on Redis's own clock.
--
-- 1. Skip when another tick of this event ran less than ARGV[1] ms ago, so
--    two workers that both believe they hold the tick lease still make one
--    tick per period.
-- 2. Prune expired leases.
-- 3. Unless paused, not yet open, or a lottery not yet drawn: admit
--    min(capacity - active, batch) from the head, re-checking each popped
--    candidate's heartbeat. The sweep (sweep.lua, run just before) is
--    bounded, so stale entries may still sit at the head: they are dropped
--    here, never admitted.
-- 4. Keep the bookkeeping behind the statistics and the wait estimate.
--
-- After a gap between ticks longer than ARGV[3] ms (Redis or every worker
-- was down), heartbeats could not be recorded during the gap: the gap is
-- credited to everyone for one heartbeat timeout, so people who kept their
-- sockets open are not dropped for Redis's silence.
--
-- During a rolling upgrade from the layout of two sorted sets (entry.lua),
-- each tick first moves max(batch, 1000) entries (at most ARGV[6]) from the
-- old queue's head
-- into the line, and admits nobody from behind the old queue's head until
-- it is empty: first in, first out across both.
--
-- KEYS: 1 line, 2 leases, 3 sequence, 4 settings, 5 state, 6 tick log,
--       7 join-time index, 8 old-layout queue, 9 old-layout heartbeats
-- ARGV: 1 min gap between ticks ms, 2 cleanup bound, 3 outage gap ms,
--       4 estimate window ms, 5 entries the sweep just removed, 6 sweep
--       bound (also bounds the old-layout entries moved per tick)
-- Returns {status, now, capacity, active, queued, abandoned, admitted users,
--          their waits in ms}; status is ok, skip, gone, paused, closed
--          (before the open time) or draw (lottery draw pending).
local now = nowms()
local sec = math.floor(now / 1000)

local cfg = redis.call('HMGET', KEYS[4], 'cap', 'batch', 'lease', 'hbt', 'open', 'mode', 'paused')
if not cfg[1] then
  return {'gone', now}
end
local capacity, batch = tonumber(cfg[1]), tonumber(cfg[2])
local leaseMs, timeoutMs = tonumber(cfg[3]) * 1000, tonumber(cfg[4]) * 1000
local open = tonumber(cfg[5]) or 0

local st = redis.call('HMGET', KEYS[5], 'lt', 'credit', 'creditUntil', 'drawn', 'lastseq', 'since', 'old')
local last = tonumber(st[1]) or 0
if last > 0 and now - last < tonumber(ARGV[1]) then
  return {'skip', now}
end
local credit, creditUntil = tonumber(st[2]) or 0, tonumber(st[3]) or 0
if last > 0 and now - last > tonumber(ARGV[3]) then
  credit, creditUntil = now - last, now + timeoutMs
end
if now > creditUntil then
  credit = 0
end
redis.call('HSET', KEYS[5], 'lt', now, 'credit', credit, 'creditUntil', creditUntil)

redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now)
-- An entry is abandoned once its silence exceeds this many seconds.
local limit = math.floor((timeoutMs + credit) / 1000)
local function abandonedEntry(score)
  return silence(score, sec) > limit
end

local cleanupBound = tonumber(ARGV[2])
-- The sweep (sweep.lua) ran just before this tick; its removals are
-- logged with the tick's.
local abandoned = tonumber(ARGV[5])

-- Entries queued by a binary of the old layout move over, oldest first.
local ceiling = '+inf'
local legacy = redis.call('EXISTS', KEYS[8]) == 1
if legacy then
  local olds = redis.call('ZRANGE', KEYS[8], 0, math.min(math.max(batch, 1000), tonumber(ARGV[6])) - 1, 'WITHSCORES')
  for i = 1, #olds, 2000 do
    local users, scores = {}, {}
    for j = i, math.min(i + 1999, #olds), 2 do
      users[#users + 1] = olds[j]
      scores[#scores + 1] = olds[j + 1]
    end
    abandoned = abandoned + adopt(KEYS[8], KEYS[9], KEYS[1], users, scores, sec, limit)
  end
  local head = redis.call('ZRANGE', KEYS[8], 0, 0, 'WITHSCORES')
  if head[2] then
    ceiling = '(' .. pack(legacyPlace(head[2]), 0)
  end
  legacy = head[2] ~= nil
elseif redis.call('EXISTS', KEYS[9]) == 1 then
  redis.call('DEL', KEYS[9]) -- heartbeats of nobody in the old queue
end
-- Join and the sockets' re-read look for old-layout entries only while
-- this mark is set, so a finished upgrade costs them nothing. Until a tick
-- has set it, someone an old binary queued and who asks a new one gets a
-- place at the back for a moment: the next tick moves the old entry over,
-- and the earlier place wins.
if legacy ~= (st[7] == '1') then
  redis.call('HSET', KEYS[5], 'old', legacy and '1' or '0')
end

-- Record when the sequence reached its current value, before admitting, so
-- every admitted entry finds the moment it had joined by (to one tick).
local seq = tonumber(redis.call('GET', KEYS[3]) or '0')
if seq > (tonumber(st[5]) or 0) then
  redis.call('ZADD', KEYS[7], seq, now)
  redis.call('HSET', KEYS[5], 'lastseq', seq)
end

local status = 'ok'
if cfg[7] == '1' then
  status = 'paused'
elseif open > 0 and now < open then
  status = 'closed'
elseif cfg[6] == 'lottery' and open > 0 and st[4] ~= '1' then
  status = 'draw'
end

-- joinTimes answers when each of the popped sequences (ascending) had been
-- reached, from one range read of the join-time index.
local function joinTimes(places)
  local out = {}
  if #places == 0 then
    return out
  end
  local recs = redis.call('ZRANGEBYSCORE', KEYS[7], places[1], places[#places], 'WITHSCORES')
  local after = redis.call('ZRANGEBYSCORE', KEYS[7], '(' .. places[#places], '+inf', 'WITHSCORES', 'LIMIT', 0, 1)
  recs[#recs + 1], recs[#recs + 2] = after[1], after[2]
  local j = 1
  for i, s in ipairs(places) do
    while recs[j + 1] and tonumber(recs[j + 1]) < s do
      j = j + 2
    end
    out[i] = tonumber(recs[j]) or now
  end
  return out
end

local admitted, waits = {}, {}
if status == 'ok' then
  local since = tonumber(st[6]) or 0
  if since == 0 then
    redis.call('HSET', KEYS[5], 'since', now)
  end
  local want = math.min(capacity - redis.call('ZCARD', KEYS[2]), batch)
  local budget = want + cleanupBound
  while #admitted < want and budget > 0 do
    -- Pop in slices of at most 1000 (Lua's unpack limit); each candidate's
    -- heartbeat comes with it in its score.
    local n = math.min(want - #admitted, budget, 1000)
    local popped
    if ceiling == '+inf' then
      popped = redis.call('ZPOPMIN', KEYS[1], n)
    else
      popped = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', ceiling, 'WITHSCORES', 'LIMIT', 0, n)
      local users = {}
      for i = 1, #popped, 2 do
        users[#users + 1] = popped[i]
      end
      zremAll(KEYS[1], users)
    end
    if #popped == 0 then
      break
    end
    budget = budget - #popped / 2
    local leases, fifo, fifoUsers = {}, {}, {}
    for i = 1, #popped, 2 do
      local user, score = popped[i], popped[i + 1]
      if abandonedEntry(score) then
        abandoned = abandoned + 1
      else
        leases[#leases + 1] = now + leaseMs
        leases[#leases + 1] = user
        admitted[#admitted + 1] = user
        local place = placeOf(score)
        if place > 0 then
          fifo[#fifo + 1] = place
          fifoUsers[#fifoUsers + 1] = #admitted
        else
          waits[#admitted] = math.max(0, now - open)
        end
      end
    end
    if #leases > 0 then
      redis.call('ZADD', KEYS[2], unpack(leases))
    end
    for i, joined in ipairs(joinTimes(fifo)) do
      waits[fifoUsers[i]] = math.max(0, now - joined)
    end
  end
end

-- Trim the join-time index below the oldest sequence still in line (once
-- the old layout's queue, which may hold older ones, is empty).
local lo = placeRange(1, 1)
local head = redis.call('ZRANGEBYSCORE', KEYS[1], lo, '+inf', 'WITHSCORES', 'LIMIT', 0, 1)
if ceiling ~= '+inf' then
  -- keep every record
elseif head[2] then
  redis.call('ZREMRANGEBYSCORE', KEYS[7], '-inf', '(' .. fmt(placeOf(head[2])))
else
  redis.call('ZREMRANGEBYSCORE', KEYS[7], '-inf', '(' .. seq)
end

-- Tick log: admissions and abandonments per tick over the estimate window,
-- with a running sum of the admissions in it.
local window = tonumber(ARGV[4])
local sum = tonumber(redis.call('HGET', KEYS[5], 'wsum')) or 0
for _, e in ipairs(redis.call('ZRANGEBYSCORE', KEYS[6], '-inf', '(' .. (now - window))) do
  sum = sum - tonumber(string.match(e, '^%d+:(%d+):'))
end
redis.call('ZREMRANGEBYSCORE', KEYS[6], '-inf', '(' .. (now - window))
if #admitted > 0 or abandoned > 0 then
  redis.call('ZADD', KEYS[6], now, now .. ':' .. #admitted .. ':' .. abandoned)
  sum = sum + #admitted
end
redis.call('HSET', KEYS[5], 'wsum', math.max(sum, 0))
if status == 'ok' then
  local since = tonumber(redis.call('HGET', KEYS[5], 'since'))
  local span = math.max(now - math.max(now - window, since), 1000)
  redis.call('HSET', KEYS[5], 'rate', string.format('%.4f', sum * 1000 / span))
end

local queued = redis.call('ZCARD', KEYS[1]) + redis.call('ZCARD', KEYS[8])
local out = {status, now, capacity, redis.call('ZCARD', KEYS[2]), queued, abandoned, admitted, waits}
return out
