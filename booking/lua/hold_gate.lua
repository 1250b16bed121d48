-- The Redis part of a hold, in one call (the waiting room's lease_lib.lua
-- and hint_lib.lua come first): the user's rate, then the admission lease,
-- then the cart's seat hints, each only if the one before let it through;
-- and once the hints are taken, the lease moved to the hold's time, so
-- that a hold that commits needs no second call (a hold that does not
-- puts it back: hold_undo.lua).
-- Every key is in the slot of the event's leases (Redis Cluster).
-- KEYS: 1 the event's leases, 2 the user's hold-rate counter,
--       3.. the cart's hint keys (none: count and check only).
-- ARGV: 1 user, 2 rate window ms, 3 attempts allowed per window,
--       4 hint owner (the reservation id), 5 claim, 6 hint ttl ms,
--       7 the hold's time in ms (0: unknown, leave the lease as it is).
-- Returns {outcome, attempts, window ms left, lease expiry before, lease
-- expiry set (0: not moved)}; outcome: 0 admitted and the hints taken, 1
-- over the rate, 2 no live lease, n+2 the cart's n-th seat is hinted for
-- another request (no hint taken).
local n = redis.call('INCR', KEYS[2])
if n == 1 then
  redis.call('PEXPIRE', KEYS[2], ARGV[2])
end
local left = redis.call('PTTL', KEYS[2])
if n > tonumber(ARGV[3]) then
  return {1, n, left, 0, 0}
end
local now = lease_now()
local was = lease_live(KEYS[1], ARGV[1], now)
if was == 0 then
  return {2, n, left, 0, 0}
end
local taken = hint_take(KEYS, 3, ARGV[4], ARGV[5], ARGV[6])
if taken ~= 0 then
  return {taken + 2, n, left, 0, 0}
end
local set = 0
if #KEYS >= 3 and tonumber(ARGV[7]) > 0 then
  set = lease_extend(KEYS[1], ARGV[1], now, ARGV[7])
end
return {0, n, left, was, set}
