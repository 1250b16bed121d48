-- Applies a batch of pings (and closes) of one shard to its lifecycle
-- indexes: live sessions by deadline, closed sessions by the end of their
-- grace. Consumers of one group may apply entries out of stream order, and
-- a gateway appends its plain pings in batches (after a close it wrote at
-- once), so:
--   * a close always ends a session's pings: it moves the session to the
--     closing index over any ping, whatever their positions, and no ping
--     applies after it (a session id is never reused, so nothing of the
--     session can follow its close);
--   * among entries of one kind, older ones are ignored: a deadline only
--     moves later (GT), and the TTL is the same for every entry of a kind.
-- An entry is applied in a few commands whatever its size: its members
-- share a kind and a deadline, so one ZMSCORE finds those not live, one
-- more (only if there are any) those of them that closed, and one ZADD
-- moves every other deadline. A call per member cost more than the index
-- work it did.
--
-- KEYS: 1 deadlines zset (live), 2 closing zset
-- ARGV: per stream entry: kind (p|c), deadline (ms), member count, members
-- Returns the number of members applied.
local applied = 0
local i = 1
while i <= #ARGV do
  local kind, deadline, n = ARGV[i], ARGV[i + 1], tonumber(ARGV[i + 2])
  local mems = {}
  for j = 1, n do
    mems[j] = ARGV[i + 2 + j]
  end
  i = i + 3 + n
  local add = {}
  if kind == 'c' then
    redis.call('ZREM', KEYS[1], unpack(mems))
    for j = 1, n do
      add[2 * j - 1], add[2 * j] = deadline, mems[j]
    end
    applied = applied + redis.call('ZADD', KEYS[2], 'GT', 'CH', unpack(add))
  else
    local live = redis.call('ZMSCORE', KEYS[1], unpack(mems))
    local gone = {}
    for j = 1, n do
      if not live[j] then
        gone[#gone + 1] = mems[j]
      end
    end
    local closed = {}
    if #gone > 0 then
      -- Not live before this ping: unless it closed, it is live now.
      local scores = redis.call('ZMSCORE', KEYS[2], unpack(gone))
      for j = 1, #gone do
        if scores[j] then
          closed[gone[j]] = true
        end
      end
    end
    for j = 1, n do
      if not closed[mems[j]] then
        add[#add + 1] = deadline
        add[#add + 1] = mems[j]
      end
    end
    if #add > 0 then
      redis.call('ZADD', KEYS[1], 'GT', unpack(add))
      applied = applied + #add / 2
    end
  end
end
return applied
