--@uses companion owner
-- The extend of a leader's lease: its lock, annotation and seat.
-- KEYS: 1 the lock: the one key that exists whenever the token holds
-- (see companion).
-- ARGV: 1 token, 2 ttl ms, 3 the holder's annotation, 4 the seat (both
-- companions).
-- Reply: 1 extended, 0 not held.
if owner(redis.call('GET', KEYS[1])) == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  companion('PEXPIRE', ARGV[3], ARGV[2])
  companion('PEXPIRE', ARGV[4], ARGV[2])
  return 1
end
return 0
