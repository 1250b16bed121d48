-- Release the seat-map fill lease only if ARGV[1] still holds it, so a slow
-- filler never frees the lease of the next one.
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
