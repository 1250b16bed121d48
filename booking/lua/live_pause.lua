-- Pause or resume an event's live seat-map pushes (load shedding, rung 2),
-- and tell the viewers already connected, in one round trip: paused, they
-- poll the seat map every pollMs; resumed, they fetch it once (a reset)
-- and follow invalidations again. The switch and every section's topic
-- share the event's hash tag.
-- KEYS[1]: the event's live-pause switch.
-- ARGV: 1 the poll interval in ms, or "" to resume; 2 the hub's publish
-- command (PUBLISH or SPUBLISH); 3 the message; 4.. the sections' topics.
if ARGV[1] == '' then
  redis.call('DEL', KEYS[1])
else
  redis.call('SET', KEYS[1], ARGV[1])
end
for i = 4, #ARGV do
  redis.call(ARGV[2], ARGV[i], ARGV[3])
end
return 1
