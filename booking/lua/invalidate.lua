-- A committed change to a section, as the outbox relay's derived effect:
-- drop the event's cached seat map, then tell the section's live viewers,
-- in one round trip and in that order (a viewer who refetches at once sees
-- the change). While the event's live pushes are paused (load shedding)
-- the map is still dropped but nobody is told: viewers poll. The keys and
-- the topic share the event's hash tag.
-- KEYS[1]: the event's seat-map snapshot; KEYS[2]: its live-pause switch.
-- ARGV: 1 the section's live topic, 2 the hub's publish command (PUBLISH or
-- SPUBLISH), 3 the message.
redis.call('DEL', KEYS[1])
if redis.call('EXISTS', KEYS[2]) == 1 then
  return 0
end
redis.call(ARGV[2], ARGV[1], ARGV[3])
return 1
