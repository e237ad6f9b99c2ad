--@uses clock owner held_fence hand_over remember
-- The release of a MultiLock whose names live on one server: every name
-- its token still holds is handed over to its queue's oldest live waiter,
-- or freed, and remembers the token among its finished ones (see
-- mutex_release).
-- KEYS as multi_acquire (the release markers, KEYS[k+2], are not touched).
-- ARGV: 1 token, 2 hand ms, 3.. the release channel of each name; last,
-- the retention ms (unused).
-- Reply: 1 when every name was held (or released, within the last
-- $MARKER_MS ms, by an earlier try of this release: its finished tokens
-- say so), 0 when any had been lost.
local n = #KEYS / 7
local all, held, vals, any = 1, {}, {}, false
for i = 0, n - 1 do
  local k = i * 7 + 1
  vals[i] = redis.call('GET', KEYS[k])
  held[i] = owner(vals[i]) == ARGV[1]
  local done = redis.call('ZSCORE', KEYS[k+4], ARGV[1]) -- type-checks before any write
  if held[i] then any = true elseif not done then all = 0 end
end
if any then
  local now, us = clock()
  for i = 0, n - 1 do
    if held[i] then
      local k = i * 7 + 1
      remember(KEYS[k+4], ARGV[1], now, held_fence(vals[i]), us)
      hand_over(k, ARGV[1], ARGV[3+i], ARGV[2], vals[i], now, us, true)
    end
  end
end
return all
