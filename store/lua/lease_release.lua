-- Release a lease only if ARGV[1] still holds it, so a holder whose lease
-- expired and was taken over never frees the new holder's lease.
-- KEYS[1] lease key; ARGV[1] owner token.
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
