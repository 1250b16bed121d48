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
-- An entry is applied in one command whatever its size, in the common
-- case: its members share a kind and a deadline, so one ZADD GT moves
-- every deadline. Only when it added members the live index lacked (their
-- first ping was lost, or they timed out already) does one ZMSCORE look
-- for closes among the entry's members, and a ZREM take the closed ones
-- out again. A call per member cost more than the index work it did.
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
  for j = 1, n do
    add[2 * j - 1], add[2 * j] = deadline, mems[j]
  end
  if kind == 'c' then
    redis.call('ZREM', KEYS[1], unpack(mems))
    applied = applied + redis.call('ZADD', KEYS[2], 'GT', 'CH', unpack(add))
  else
    applied = applied + n
    if redis.call('ZADD', KEYS[1], 'GT', unpack(add)) > 0 then
      -- Some were not live before this ping: unless they closed, they are
      -- live now.
      local closed = redis.call('ZMSCORE', KEYS[2], unpack(mems))
      local out = {}
      for j = 1, n do
        if closed[j] then
          out[#out + 1] = mems[j]
        end
      end
      if #out > 0 then
        redis.call('ZREM', KEYS[1], unpack(out))
        applied = applied - #out
      end
    end
  end
end
return applied
