--@uses hand_over pass_seat mark_released was_released
-- A leader's resignation (the release of its lease): the lock is handed to
-- the oldest live candidate, who is seated at once, or the seat is emptied.
-- KEYS as el_acquire.
-- ARGV: 1 token, 2 the release channel, 3 how long a lock handed over
-- waits for its new holder to confirm, ms, 4 the fence counter's retention
-- ms, 5 the observers' channel.
-- Reply: 1 released (now, or within the last $MARKER_MS ms by an earlier
-- try of this release: see mark_released), 0 not held.
redis.call('HLEN', KEYS[8])
redis.call('HLEN', KEYS[9])
if redis.call('GET', KEYS[1]) == ARGV[1] then
  local t, f, entry = hand_over(1, ARGV[1], ARGV[2], ARGV[3], ARGV[4])
  pass_seat(t, f, entry, tonumber(ARGV[3]), ARGV[5])
  mark_released(KEYS[3], ARGV[1])
  return 1
end
if was_released(KEYS[3], ARGV[1]) then return 1 end
return 0
