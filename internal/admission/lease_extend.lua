-- Move a live lease's expiry to ARGV[2] ms from now (lease_lib.lua comes
-- first). A lease that expired (or never existed) is not revived: the user
-- has to queue again.
-- KEYS: 1 leases; ARGV: 1 user, 2 duration ms
-- Returns the new expiry in ms, or 0 when there was no live lease.
return lease_extend(KEYS[1], ARGV[1], lease_now(), ARGV[2])
