-- forcerelease: deletes a name's keys, except what keeps its fences
-- increasing, and wakes its waiters, for release -force.
-- KEYS and ARGV[3], by how the kind keeps its fence:
--   "1": KEYS[1] the fence counter (read, never deleted), 2... the keys
--   to delete;
--   "lock" (the Mutex layout): KEYS[1] the lock ("token fence"), KEYS[2]
--   the finished tokens (kept: a late copy of an attempt stays refused,
--   and the lock's fence is added as member "#", kept ARGV[4] ms after
--   the server's clock passes it, so that
--   the next grant's fence is above it), 3... the other keys to delete;
--   "": all the keys to delete (a latch).
-- ARGV: 1 the release channel, 2 the message (pubsub.WakeAll), 3 as above,
-- 4 with "lock", how long the finished tokens keep the fence, ms.
-- Reply: {keys deleted, the fence kept or false}.
local f, first, n = false, 1, 0
if ARGV[3] == '1' then
  first = 2
  if redis.call('TYPE', KEYS[1]).ok == 'string' then f = redis.call('GET', KEYS[1]) end
elseif ARGV[3] == 'lock' then
  first = 3
  local v = redis.call('TYPE', KEYS[1]).ok == 'string' and redis.call('GET', KEYS[1])
  local sp = v and string.find(v, ' ', 1, true)
  local held = sp and tonumber(string.sub(v, sp + 1))
  if redis.call('TYPE', KEYS[2]).ok == 'zset' or redis.call('EXISTS', KEYS[2]) == 0 then
    local kept = tonumber(redis.call('ZSCORE', KEYS[2], '#') or '0')
    if held and held > kept then
      redis.call('ZADD', KEYS[2], held, '#')
      kept = held
    end
    if kept > 0 then
      f = string.format('%.0f', kept)
      local t = redis.call('TIME')
      local ahead = math.max(0, math.ceil((kept - (tonumber(t[1]) * 1000000 + tonumber(t[2]))) / 1000))
      local keep = tonumber(ARGV[4]) + ahead
      if redis.call('PTTL', KEYS[2]) < keep then redis.call('PEXPIRE', KEYS[2], keep) end
    end
  end
  n = redis.call('DEL', KEYS[1])
end
if #KEYS >= first then n = n + redis.call('DEL', unpack(KEYS, first)) end
redis.pcall('PUBLISH', ARGV[1], ARGV[2])
return {n, f}
