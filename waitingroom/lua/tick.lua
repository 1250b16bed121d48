-- One admission tick of one event, atomic on Redis's own clock.
--
-- 1. Skip when another tick of this event ran less than ARGV[1] ms ago, so
--    two workers that both believe they hold the tick lease still make one
--    tick per period.
-- 2. Prune expired leases.
-- 3. Remove at most ARGV[2] abandoned entries (heartbeat older than the
--    event's timeout), so a huge abandoned line cannot monopolize Redis.
-- 4. Unless paused, not yet open, or a lottery not yet drawn: admit
--    min(capacity - active, batch) from the head, re-checking each popped
--    candidate's heartbeat. Cleanup is bounded, so stale entries may still
--    sit at the head: they are dropped here, never admitted.
-- 5. Keep the bookkeeping behind the statistics and the wait estimate.
--
-- After a gap between ticks longer than ARGV[3] ms (Redis or every worker
-- was down), heartbeats could not be recorded during the gap: the gap is
-- credited to everyone for one heartbeat timeout, so people who kept their
-- sockets open are not dropped for Redis's silence.
--
-- KEYS: 1 queue, 2 heartbeats, 3 leases, 4 sequence, 5 settings, 6 state,
--       7 tick log, 8 join-time index
-- ARGV: 1 min gap between ticks ms, 2 cleanup bound, 3 outage gap ms,
--       4 estimate window ms
-- Returns {status, now, capacity, active, queued, abandoned, admitted users,
--          their waits in ms}; status is ok, skip, gone, paused, closed
--          (before the open time) or draw (lottery draw pending).
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)

local cfg = redis.call('HMGET', KEYS[5], 'cap', 'batch', 'lease', 'hbt', 'open', 'mode', 'paused')
if not cfg[1] then
  return {'gone', now}
end
local capacity, batch = tonumber(cfg[1]), tonumber(cfg[2])
local leaseMs, timeoutMs = tonumber(cfg[3]) * 1000, tonumber(cfg[4]) * 1000
local open = tonumber(cfg[5]) or 0

local st = redis.call('HMGET', KEYS[6], 'lt', 'credit', 'creditUntil', 'drawn', 'lastseq', 'since')
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
redis.call('HSET', KEYS[6], 'lt', now, 'credit', credit, 'creditUntil', creditUntil)

redis.call('ZREMRANGEBYSCORE', KEYS[3], '-inf', now)
local cutoff = now - timeoutMs - credit

local abandoned = 0
local stale = redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', '(' .. cutoff, 'LIMIT', 0, tonumber(ARGV[2]))
for i = 1, #stale, 500 do
  local chunk = {unpack(stale, i, math.min(i + 499, #stale))}
  abandoned = abandoned + redis.call('ZREM', KEYS[1], unpack(chunk))
  redis.call('ZREM', KEYS[2], unpack(chunk))
end

-- Record when the sequence reached its current value, before admitting, so
-- every admitted entry finds the moment it had joined by (to one tick).
local seq = tonumber(redis.call('GET', KEYS[4]) or '0')
if seq > (tonumber(st[5]) or 0) then
  redis.call('ZADD', KEYS[8], seq, now)
  redis.call('HSET', KEYS[6], 'lastseq', seq)
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
local function joinTimes(scores)
  local out = {}
  if #scores == 0 then
    return out
  end
  local recs = redis.call('ZRANGEBYSCORE', KEYS[8], scores[1], scores[#scores], 'WITHSCORES')
  local last = redis.call('ZRANGEBYSCORE', KEYS[8], '(' .. scores[#scores], '+inf', 'WITHSCORES', 'LIMIT', 0, 1)
  recs[#recs + 1], recs[#recs + 2] = last[1], last[2]
  local j = 1
  for i, s in ipairs(scores) do
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
    redis.call('HSET', KEYS[6], 'since', now)
  end
  local want = math.min(capacity - redis.call('ZCARD', KEYS[3]), batch)
  local budget = want + tonumber(ARGV[2])
  while #admitted < want and budget > 0 do
    -- Pop in slices of at most 1000 (Lua's unpack limit), re-checking every
    -- candidate's heartbeat in one read.
    local popped = redis.call('ZPOPMIN', KEYS[1], math.min(want - #admitted, budget, 1000))
    if #popped == 0 then
      break
    end
    local users = {}
    for i = 1, #popped, 2 do
      users[#users + 1] = popped[i]
    end
    budget = budget - #users
    local seen = redis.call('ZMSCORE', KEYS[2], unpack(users))
    redis.call('ZREM', KEYS[2], unpack(users))
    local leases, drawn, fifo, fifoUsers = {}, {}, {}, {}
    for i, user in ipairs(users) do
      local at = tonumber(seen[i])
      if at and at >= cutoff then
        leases[#leases + 1] = now + leaseMs
        leases[#leases + 1] = user
        admitted[#admitted + 1] = user
        local score = tonumber(popped[2 * i])
        if score > 0 then
          fifo[#fifo + 1] = score
          fifoUsers[#fifoUsers + 1] = #admitted
        else
          waits[#admitted] = math.max(0, now - open)
        end
      else
        abandoned = abandoned + 1
      end
    end
    if #leases > 0 then
      redis.call('ZADD', KEYS[3], unpack(leases))
    end
    for i, joined in ipairs(joinTimes(fifo)) do
      waits[fifoUsers[i]] = math.max(0, now - joined)
    end
  end
end

-- Trim the join-time index below the oldest sequence still in line.
local head = redis.call('ZRANGEBYSCORE', KEYS[1], 1, '+inf', 'WITHSCORES', 'LIMIT', 0, 1)
if head[2] then
  redis.call('ZREMRANGEBYSCORE', KEYS[8], '-inf', '(' .. head[2])
else
  redis.call('ZREMRANGEBYSCORE', KEYS[8], '-inf', '(' .. seq)
end

-- Tick log: admissions and abandonments per tick over the estimate window,
-- with a running sum of the admissions in it.
local window = tonumber(ARGV[4])
local sum = tonumber(redis.call('HGET', KEYS[6], 'wsum')) or 0
for _, e in ipairs(redis.call('ZRANGEBYSCORE', KEYS[7], '-inf', '(' .. (now - window))) do
  sum = sum - tonumber(string.match(e, '^%d+:(%d+):'))
end
redis.call('ZREMRANGEBYSCORE', KEYS[7], '-inf', '(' .. (now - window))
if #admitted > 0 or abandoned > 0 then
  redis.call('ZADD', KEYS[7], now, now .. ':' .. #admitted .. ':' .. abandoned)
  sum = sum + #admitted
end
redis.call('HSET', KEYS[6], 'wsum', math.max(sum, 0))
if status == 'ok' then
  local since = tonumber(redis.call('HGET', KEYS[6], 'since'))
  local span = math.max(now - math.max(now - window, since), 1000)
  redis.call('HSET', KEYS[6], 'rate', string.format('%.4f', sum * 1000 / span))
end

local out = {status, now, capacity, redis.call('ZCARD', KEYS[3]), redis.call('ZCARD', KEYS[1]), abandoned, admitted, waits}
return out
