-- The extend of a leader's lease: its lock, annotation and seat.
-- KEYS as el_acquire.
-- ARGV: 1 token, 2 ttl ms.
-- Reply: 1 extended, 0 not held.
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  redis.call('PEXPIRE', KEYS[4], ARGV[2])
  redis.call('PEXPIRE', KEYS[8], ARGV[2])
  return 1
end
return 0
