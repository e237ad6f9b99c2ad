--@uses hand_over mark_released was_released
-- The release of a MultiLock whose names live on one server: every name
-- its token still holds is handed over to its queue's oldest live waiter,
-- or freed.
-- KEYS as multi_acquire.
-- ARGV: 1 token, 2 hand ms, 3.. the release channel of each name; last,
-- the fence counter's retention ms.
-- Reply: 1 when every name was held (or released, within the last
-- $MARKER_MS ms, by an earlier try of this release: see mark_released),
-- 0 when any had been lost.
local n = #KEYS / 7
local all, held = 1, {}
for i = 0, n - 1 do
  local k = i * 7 + 1
  held[i] = redis.call('GET', KEYS[k]) == ARGV[1]
  if not held[i] and not was_released(KEYS[k+2], ARGV[1]) then all = 0 end
end
for i = 0, n - 1 do
  if held[i] then
    local k = i * 7 + 1
    hand_over(k, ARGV[1], ARGV[3+i], ARGV[2], ARGV[#ARGV])
    mark_released(KEYS[k+2], ARGV[1])
  end
end
return all
