-- The rules of a checkout lease, on Redis's clock: the one definition that
-- the waiting room's own lease scripts and a caller's script (booking's
-- hold, which checks the lease, counts the rate and takes seat hints in one
-- call) start with. A lease is the user's score, its expiry in ms, in the
-- event's leases sorted set.
local function lease_now()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

-- The expiry in ms of user's live lease in key, or 0.
local function lease_live(key, user, now)
  local exp = tonumber(redis.call('ZSCORE', key, user))
  if exp and exp > now then
    return exp
  end
  return 0
end

-- Moves a live lease's expiry to ms from now and returns it; a lease that
-- expired (or never existed) is not revived (0): the user queues again.
local function lease_extend(key, user, now, ms)
  if lease_live(key, user, now) == 0 then
    return 0
  end
  local until_ = now + tonumber(ms)
  redis.call('ZADD', key, 'XX', until_, user)
  return until_
end
