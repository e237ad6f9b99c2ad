--@uses now_ms hand_over dequeue remember
-- The give-back of a MultiLock acquisition that ended without a grant: the
-- token is remembered as given back on every name (a late copy of its
-- attempt is refused), its entries leave every queue, and every name its
-- token holds (reserved, or granted by an attempt whose reply was lost or
-- came too late) is passed on.
-- KEYS as multi_acquire.
-- ARGV: 1 token, 2 hand ms, 3 the queue entry ("" for none), 4.. the
-- release channel of each name; last, the fence counter's retention ms.
-- Reply: 0.
local n = #KEYS / 7
local mine = {}
for i = 0, n - 1 do
  mine[i] = redis.call('GET', KEYS[i * 7 + 1]) == ARGV[1]
  redis.call('ZCARD', KEYS[i * 7 + 5])
end
local now = now_ms()
for i = 0, n - 1 do
  local k = i * 7 + 1
  remember(KEYS[k+4], ARGV[1], now)
  if ARGV[3] ~= '' then dequeue(KEYS[k+5], KEYS[k+6], ARGV[3]) end
  if mine[i] then hand_over(k, ARGV[1], ARGV[4+i], ARGV[2], ARGV[#ARGV]) end
end
return 0
