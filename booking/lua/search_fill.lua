-- Store one cached search answer of a city, unless an inventory change was
-- relayed since the reader read the city's version (before it queried):
-- then the answer may predate the change and must not outlive it.
-- KEYS[1] version, KEYS[2] the city's answers (hash); ARGV[1] the version
-- seen ('0' when there was none), ARGV[2] field, ARGV[3] answer, ARGV[4] ttl ms.
local v = redis.call('GET', KEYS[1]) or '0'
if v ~= ARGV[1] then
  return 0
end
redis.call('HSET', KEYS[2], ARGV[2], ARGV[3])
redis.call('PEXPIRE', KEYS[2], ARGV[4])
return 1
