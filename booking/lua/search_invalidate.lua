-- An inventory change of nights ARGV[2] up to ARGV[3] (YYYY-MM-DD, end
-- exclusive): drop the city's cached answers of stays that overlap those
-- nights (all of them when no range is given; ISO dates compare as
-- strings), and move the city's version on, so a reader that queried before
-- the change cannot store its answer afterwards.
-- KEYS[1] version, KEYS[2] the city's answers (fields "checkIn|checkOut");
-- ARGV[1] version ttl ms.
redis.call('INCR', KEYS[1])
redis.call('PEXPIRE', KEYS[1], ARGV[1])
local from, to = ARGV[2], ARGV[3]
if from == '' or to == '' then
  redis.call('DEL', KEYS[2])
  return 1
end
for _, f in ipairs(redis.call('HKEYS', KEYS[2])) do
  local checkIn, checkOut = string.sub(f, 1, 10), string.sub(f, 12, 21)
  if checkIn < to and checkOut > from then
    redis.call('HDEL', KEYS[2], f)
  end
end
return 1
