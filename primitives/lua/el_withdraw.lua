--@uses clock lock_read flag_given_back hand_over dequeue remember pass_seat
-- The give-back of a campaign that ended without leading: its queue entry
-- and value leave, the token is remembered and the name's key flagged (a
-- late copy of its attempt is refused: see mutex_withdraw), and a seat it
-- holds (granted by an attempt whose reply was lost, or handed over) is
-- passed on as a resignation would.
-- KEYS as el_acquire.
-- ARGV: 1 token, 2 the release channel, 3 hand ms (see el_release), 4 the
-- queue entry ("" for a TryCampaign), 5 the retention ms (unused), 6 the observers'
-- channel, 7 "0" when the campaign goes on (a grant WithReplicaAck refused:
-- the token is not remembered, see election.pass).
-- Reply: 0.
redis.call('HLEN', KEYS[8])
redis.call('HLEN', KEYS[9])
redis.call('ZCARD', KEYS[5])
local v = redis.call('GET', KEYS[1])
local now, us = clock()
local gone = ARGV[7] ~= '0' and now + $MARKER_MS or nil
if gone then remember(KEYS[5], ARGV[1], now) end
if ARGV[4] ~= '' then
  dequeue(KEYS[6], KEYS[7], ARGV[4])
  redis.call('HDEL', KEYS[9], ARGV[4])
end
local o, f, fl = lock_read(v, now)
if o == ARGV[1] then
  local t, nf, entry = hand_over(1, ARGV[1], ARGV[2], ARGV[3], v, now, us, gone)
  pass_seat(t, nf, entry, tonumber(ARGV[3]), ARGV[6])
elseif gone then
  flag_given_back(KEYS[1], v, o, f, fl, gone, now, us)
end
return 0
