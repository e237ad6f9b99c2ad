--@uses clock lock_read hand_over pass_seat
-- A leader's resignation (the release of its lease): the lock is handed to
-- the oldest live candidate, who is seated at once, or the seat is emptied
-- (see mutex_release: nothing is remembered).
-- KEYS as el_acquire (the reserved keys are not touched).
-- ARGV: 1 token, 2 the release channel, 3 how long a lock handed over
-- waits for its new holder to confirm, ms, 4 the retention ms
-- (unused), 5 the observers' channel.
-- Reply: 1 released, 0 not held.
redis.call('HLEN', KEYS[8])
redis.call('HLEN', KEYS[9])
local v = redis.call('GET', KEYS[1])
local now, us = clock()
if lock_read(v, now) == ARGV[1] then
  local t, f, entry = hand_over(1, ARGV[1], ARGV[2], ARGV[3], v, now, us)
  pass_seat(t, f, entry, tonumber(ARGV[3]), ARGV[5])
  return 1
end
return 0
