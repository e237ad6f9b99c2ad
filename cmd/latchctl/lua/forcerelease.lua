-- forcerelease: deletes a name's keys, except what keeps its fences
-- increasing, and wakes its waiters, for release -force.
-- KEYS and ARGV[3], by how the kind keeps its fence:
--   "lock" (the Mutex layout): KEYS[1] the lock ("token fence[ flags]",
--   or a free marker "~ fence[ flags]"), which becomes a free marker of
--   its fence (and of its given-back window, flag g), kept ARGV[4] ms
--   after the server's clock passes the fence, so that the next grant's
--   fence is above it; KEYS[2] the given-back tokens (kept: a late copy
--   of a given-up attempt stays refused), 3... the other keys to delete;
--   "held" (a Semaphore, RWLock or FairSemaphore): KEYS[1] the given-back
--   tokens (kept, with the highest fence held as member "#"),
--   2..ARGV[5]+1 the keys that hold the holders' fences (a zset of
--   holders whose members "#"+token are scored by their fences, a hash
--   token -> fence, or a writer "token fence"), read, then deleted with
--   the other keys that follow;
--   "": all the keys to delete (a latch).
-- ARGV: 1 the release channel, 2 the message (pubsub.WakeAll), 3 as above,
-- 4 with "lock" or "held", how long the fence is kept past the server's
-- clock, ms, 5 with "held", how many keys hold fences.
-- Reply: {keys deleted, the fence kept or false}.
local f, first, n = false, 1, 0
local function fence_in(v)
  local sp = v and string.find(v, ' ', 1, true)
  return sp and tonumber(string.match(string.sub(v, sp + 1), '^%d+')) or 0
end
local t = redis.call('TIME')
local now, us = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000), tonumber(t[1]) * 1000000 + tonumber(t[2])
-- keep keeps fence held beside the given-back tokens gone (or the one
-- kept there, when higher), and returns it as a string, or false.
local function keep(gone, held)
  if redis.call('TYPE', gone).ok ~= 'zset' and redis.call('EXISTS', gone) == 1 then return false end
  local kept = tonumber(redis.call('ZSCORE', gone, '#') or '0')
  if held > kept then
    redis.call('ZADD', gone, held, '#')
    kept = held
  end
  if kept <= 0 then return false end
  local ms = tonumber(ARGV[4]) + math.max(0, math.ceil((kept - us) / 1000))
  if redis.call('PTTL', gone) < ms then redis.call('PEXPIRE', gone, ms) end
  return string.format('%.0f', kept)
end
if ARGV[3] == 'lock' then
  first = 3
  local v = redis.call('TYPE', KEYS[1]).ok == 'string' and redis.call('GET', KEYS[1])
  local fence = fence_in(v)
  if fence > 0 then
    f = string.format('%.0f', fence)
    local ms = tonumber(ARGV[4]) + math.max(0, math.ceil((fence - us) / 1000))
    local marker = '~ ' .. f
    local g = tonumber(string.match(v, ' g(%d+)'))
    if g and g > now then
      marker = marker .. ' g' .. string.format('%.0f', g)
      ms = math.max(ms, g - now)
    end
    if fence > us then marker = marker .. ' >' end
    redis.call('SET', KEYS[1], marker, 'PX', ms)
    n = 1
  else
    n = redis.call('DEL', KEYS[1])
  end
elseif ARGV[3] == 'held' then
  first = 2
  local held = 0
  for i = 2, 1 + tonumber(ARGV[5]) do
    local typ = redis.call('TYPE', KEYS[i]).ok
    if typ == 'zset' then
      local top = tonumber(redis.call('ZRANGE', KEYS[i], -1, -1, 'WITHSCORES')[2])
      if top and top >= 1e14 then held = math.max(held, top) end
    elseif typ == 'hash' then
      for _, x in ipairs(redis.call('HVALS', KEYS[i])) do held = math.max(held, tonumber(x) or 0) end
    elseif typ == 'string' then
      held = math.max(held, fence_in(redis.call('GET', KEYS[i])))
    end
  end
  f = keep(KEYS[1], held)
end
if #KEYS >= first then n = n + redis.call('DEL', unpack(KEYS, first)) end
redis.pcall('PUBLISH', ARGV[1], ARGV[2])
return {n, f}
