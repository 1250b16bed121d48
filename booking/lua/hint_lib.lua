-- Seat hints: all or nothing for one cart. The hints only turn obvious
-- contention into a cheap rejection: PostgreSQL still decides ownership.
-- A hint is "<owner>|<claim>": the reservation it was taken for, and the
-- request that took it (its user and idempotency key). A retry of the same
-- request, concurrent or after its commit, is not refused by its own hints
-- and leaves them as they are: PostgreSQL answers it (a replay).

-- Hints keys[from..] for owner, or none: 0 on success, or the 1-based
-- index (counted from from) of the first seat hinted for another request.
local function hint_take(keys, from, owner, claim, ttl)
  local mine = '|' .. claim
  for i = from, #keys do
    local v = redis.call('GET', keys[i])
    if v and string.sub(v, -#mine) ~= mine then
      return i - from + 1
    end
  end
  local value = owner .. mine
  for i = from, #keys do
    redis.call('SET', keys[i], value, 'PX', ttl, 'NX')
  end
  return 0
end

-- Owner-checked extension of keys[from..]: a hold that committed keeps its
-- hints for its own time; a hint already lapsed or taken by another buyer
-- is left alone. Returns how many were extended.
local function hint_extend(keys, from, owner, ttl)
  local prefix = owner .. '|'
  local n = 0
  for i = from, #keys do
    local v = redis.call('GET', keys[i])
    if v and string.sub(v, 1, #prefix) == prefix then
      redis.call('PEXPIRE', keys[i], ttl)
      n = n + 1
    end
  end
  return n
end

-- Owner-checked release of keys[from..]: a late release never deletes the
-- hint of the next buyer of the same seat. Returns how many it dropped.
local function hint_drop(keys, from, owner)
  local prefix = owner .. '|'
  local n = 0
  for i = from, #keys do
    local v = redis.call('GET', keys[i])
    if v and string.sub(v, 1, #prefix) == prefix then
      redis.call('DEL', keys[i])
      n = n + 1
    end
  end
  return n
end
