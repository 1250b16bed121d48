-- Is there a live lease for the user? (lease_lib.lua comes first.)
-- KEYS: 1 leases; ARGV: 1 user
-- Returns the lease expiry in ms, or 0.
return lease_live(KEYS[1], ARGV[1], lease_now())
