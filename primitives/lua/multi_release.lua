--@uses clock lock_read hand_over
-- The release of a MultiLock whose names live on one server: every name
-- its token still holds is handed over to its queue's oldest live waiter,
-- or freed (see mutex_release: nothing is remembered).
-- KEYS as multi_acquire (the reserved keys are not touched).
-- ARGV: 1 token, 2 hand ms, 3.. the release channel of each name; last,
-- the retention ms (unused).
-- Reply: 1 when every name was held, 0 when any had been lost.
local n = #KEYS / 7
local all, held, vals, any = 1, {}, {}, false
local now, us = clock()
for i = 0, n - 1 do
  local k = i * 7 + 1
  vals[i] = redis.call('GET', KEYS[k])
  held[i] = lock_read(vals[i], now) == ARGV[1]
  if held[i] then any = true else all = 0 end
end
if any then
  for i = 0, n - 1 do
    if held[i] then
      hand_over(i * 7 + 1, ARGV[1], ARGV[3+i], ARGV[2], vals[i], now, us)
    end
  end
end
return all
