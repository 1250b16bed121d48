-- Shared by every script that reads or writes the line (prepended to each).
--
-- A queued user is one member of one sorted set, the line: the user id,
-- stored once, with a score that packs the place and the last heartbeat:
--
--   score = place * 2^21 + (heartbeat second mod 2^21)
--
-- The place (the join sequence, or a drawn lottery key below zero) is in
-- the high part, so the line still sorts by place; a heartbeat only
-- rewrites the low part, which never moves anyone. Places are kept within
-- +-2^32, so every score is an integer below 2^53, exact in a double. A
-- heartbeat is read as the silence since it, modulo 2^21 s (24 days): the
-- sweep removes silent entries long before that wraps.
local BEAT = 2097152 -- 2^21
local MAXPLACE = 4294967295 -- 2^32 - 1

local function nowms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

-- Scores go back to Redis as exact integers: Lua's own number formatting
-- keeps only 14 digits.
local function fmt(n)
  return string.format('%.0f', n)
end

local function pack(place, sec)
  return fmt(place * BEAT + sec % BEAT)
end

local function placeOf(score)
  return math.floor(tonumber(score) / BEAT)
end

-- silence: seconds since the entry's last heartbeat.
local function silence(score, nowSec)
  return (nowSec - tonumber(score)) % BEAT
end

-- The lowest and highest score of places first..last.
local function placeRange(first, last)
  return fmt(first * BEAT), fmt(last * BEAT + BEAT - 1)
end

-- zaddAll adds {score, member, ...} in slices that stay within Lua's
-- unpack limit.
local function zaddAll(key, pairs_)
  for i = 1, #pairs_, 1000 do
    redis.call('ZADD', key, unpack(pairs_, i, math.min(i + 999, #pairs_)))
  end
end

-- zremAll removes members in slices that stay within Lua's unpack limit.
local function zremAll(key, members)
  local n = 0
  for i = 1, #members, 1000 do
    n = n + redis.call('ZREM', key, unpack(members, i, math.min(i + 999, #members)))
  end
  return n
end
