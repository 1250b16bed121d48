-- Drop a city's cached search answers and move its version on, so a reader
-- that queried before the change cannot store its answer afterwards.
-- KEYS[1] version, KEYS[2] the city's answers; ARGV[1] version ttl ms.
redis.call('INCR', KEYS[1])
redis.call('PEXPIRE', KEYS[1], ARGV[1])
redis.call('DEL', KEYS[2])
return 1
