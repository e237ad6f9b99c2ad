-- The floor's release: compare-and-delete, as every Redis lock library
-- writes it.
-- KEYS: 1 the lock key. ARGV: 1 the token that must be its value.
-- Reply: 1 if the key held the token and was deleted, else 0.
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
