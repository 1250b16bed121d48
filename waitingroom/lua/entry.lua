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

-- The layout before this one kept two sorted sets, the queue (user ->
-- sequence, or a drawn key in [-2^52, -1]) and the heartbeats (user -> ms).
-- During a rolling upgrade both can hold people: whatever touches an entry
-- still in them moves it into the line, keeping its place, and every tick
-- moves a bounded slice from their head (legacy.lua's caller decides).
local LEGACY_DRAWN = 1048576 -- 2^20: old drawn keys shrink into places

-- legacyPlace is the place of an old queue score (order preserved).
local function legacyPlace(score)
  local s = tonumber(score)
  if s > 0 then
    return s
  end
  return -math.floor((-s - 1) / LEGACY_DRAWN) - 1
end

-- legacyAhead: the old-layout entries still ahead of place.
local function legacyAhead(queue, place)
  local below = place
  if place < 0 then
    below = place * LEGACY_DRAWN
  end
  return redis.call('ZCOUNT', queue, '-inf', '(' .. fmt(below))
end

-- adopt moves users (with their old scores) from the old queue and
-- heartbeats into the line and answers how many were abandoned (no
-- heartbeat, or silent past limitSec; someone asking for their place, with
-- limitSec math.huge, is alive). A user already in the line keeps the
-- better place (an old binary may have queued them again at the back).
local function adopt(queue, beats, line, users, scores, nowSec, limitSec)
  if #users == 0 then
    return 0
  end
  local seen = redis.call('ZMSCORE', beats, unpack(users))
  local moved, gone = {}, 0
  for i, user in ipairs(users) do
    local at = tonumber(seen[i])
    local sec = at and math.floor(at / 1000)
    if not sec and limitSec == math.huge then
      sec = nowSec
    end
    if sec and nowSec - sec <= limitSec then
      moved[#moved + 1] = pack(legacyPlace(scores[i]), sec)
      moved[#moved + 1] = user
    else
      gone = gone + 1
    end
  end
  zremAll(queue, users)
  zremAll(beats, users)
  for i = 1, #moved, 1000 do
    redis.call('ZADD', line, 'LT', unpack(moved, i, math.min(i + 999, #moved)))
  end
  return gone
end
