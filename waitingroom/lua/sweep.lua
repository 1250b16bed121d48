-- One slice of the sweep that finds abandoned entries. The heartbeat lives
-- in each entry's score (entry.lua), so there is no index of heartbeats to
-- search: the sweep walks the line, ARGV[1] entries a call from where the
-- last call stopped, wrapping at the end, and removes those silent longer
-- than the event's timeout (at most ARGV[2]). The worker calls it a few
-- times per tick; each slice is short, so Redis never stalls on it.
--
-- The outage credit is the tick's (tick.lua): while the last tick is older
-- than ARGV[3] ms, heartbeats could not be recorded and nobody is removed
-- until a tick has credited the gap.
--
-- KEYS: 1 line, 2 settings, 3 state
-- ARGV: 1 entries to read, 2 removals at most, 3 outage gap ms
-- Returns {read, removed, wrapped (1: reached the end of the line), entries
--          in line, heartbeat timeout s}.
local now = nowms()
local sec = math.floor(now / 1000)
local hbt = redis.call('HGET', KEYS[2], 'hbt')
if not hbt then
  return {0, 0, 1, 0, 0}
end
local st = redis.call('HMGET', KEYS[3], 'lt', 'credit', 'creditUntil', 'sweep')
local last = tonumber(st[1]) or 0
if last == 0 or now - last > tonumber(ARGV[3]) then
  return {0, 0, 1, 0, hbt}
end
local credit = 0
if now <= (tonumber(st[3]) or 0) then
  credit = tonumber(st[2]) or 0
end
local limit = math.floor((tonumber(hbt) * 1000 + credit) / 1000)

local from = st[4]
if not from or from == '' then
  from = '-inf'
end
local slice, budget = tonumber(ARGV[1]), tonumber(ARGV[2])
local walked = redis.call('ZRANGEBYSCORE', KEYS[1], from, '+inf', 'WITHSCORES', 'LIMIT', 0, slice)
local stale, stop = {}, nil
for i = 1, #walked, 2 do
  stop = walked[i + 1]
  if silence(walked[i + 1], sec) > limit then
    stale[#stale + 1] = walked[i]
    if #stale >= budget then
      break
    end
  end
end
local removed = zremAll(KEYS[1], stale)
local wrapped = 1
if stop and (#stale >= budget or #walked >= 2 * slice) then
  redis.call('HSET', KEYS[3], 'sweep', '(' .. stop)
  wrapped = 0
else
  redis.call('HSET', KEYS[3], 'sweep', '')
end
return {#walked / 2, removed, wrapped, redis.call('ZCARD', KEYS[1]), hbt}
