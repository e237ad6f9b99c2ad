--@uses clock lock_read flag_given_back hand_over dequeue remember
-- The give-back of a MultiLock acquisition that ended without a grant: the
-- token is remembered as given back on every name, and every name's key
-- flagged for the window (a late copy of its attempt is refused: see
-- mutex_withdraw), its entries leave every queue, and every name its
-- token holds (reserved, or granted by an attempt whose reply was lost or
-- came too late) is passed on.
-- Given "0" after the retention, the token is not remembered: the
-- acquisition goes on (a grant WithReplicaAck refused, see
-- multiLock.pass), and its next attempt, with the same token, must not be
-- taken for a late copy.
-- KEYS as multi_acquire.
-- ARGV: 1 token, 2 hand ms, 3 the queue entry ("" for none), 4.. the
-- release channel of each name; then the retention ms (unused);
-- last, for a pass only, "0".
-- Reply: 0.
local n = #KEYS / 7
local final = ARGV[5 + n] ~= '0'
local vals = {}
for i = 0, n - 1 do
  vals[i] = redis.call('GET', KEYS[i * 7 + 1])
  redis.call('ZCARD', KEYS[i * 7 + 5])
end
local now, us = clock()
local gone = final and now + $MARKER_MS or nil
for i = 0, n - 1 do
  local k = i * 7 + 1
  if final then remember(KEYS[k+4], ARGV[1], now) end
  if ARGV[3] ~= '' then dequeue(KEYS[k+5], KEYS[k+6], ARGV[3]) end
  local o, f, fl = lock_read(vals[i], now)
  if o == ARGV[1] then
    hand_over(k, ARGV[1], ARGV[4+i], ARGV[2], vals[i], now, us, gone)
  elseif gone then
    flag_given_back(KEYS[k], vals[i], o, f, fl, gone, now, us)
  end
end
return 0
