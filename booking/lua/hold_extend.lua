-- A committed hold's Redis part, in one call (lease_lib.lua and
-- hint_lib.lua come first): the buyer's admission lease to the hold's
-- time, and the cart's hints (still owned by the hold) to its expiry.
-- KEYS: 1 the event's leases, 2.. the cart's hint keys.
-- ARGV: 1 user, 2 lease ms, 3 hint owner (the reservation id), 4 hint ttl ms.
-- Returns {the lease's new expiry ms or 0 when it was not live, hints extended}.
local leased = lease_extend(KEYS[1], ARGV[1], lease_now(), ARGV[2])
return {leased, hint_extend(KEYS, 2, ARGV[3], ARGV[4])}
