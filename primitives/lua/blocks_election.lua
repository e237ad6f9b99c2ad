-- An election's seat (see blocks.lua).

--@ seat
-- seat records value as the leader with fence f in the seat key (a hash
-- {v, f}, expiring in ms with the lock) and, when the seat changed hands,
-- tells observers on chan: "L<fence> <ms> <value>".
local function seat(key, chan, f, value, ms)
  local cur = redis.call('HGET', key, 'f')
  redis.call('HSET', key, 'v', value)
  redis.call('HSET', key, 'f', string.format('%.0f', f))
  redis.call('PEXPIRE', key, ms)
  if tonumber(cur) ~= tonumber(f) then
    redis.pcall('PUBLISH', chan, 'L' .. string.format('%.0f', f) .. ' ' .. ms .. ' ' .. value)
  end
end

--@ unseat
-- unseat empties the seat key and tells observers on chan: "E<fence>", the
-- fence of the leader that left.
local function unseat(key, chan)
  local f = redis.call('HGET', key, 'f')
  redis.call('DEL', key)
  if f then redis.pcall('PUBLISH', chan, 'E' .. f) end
end

--@ pass_seat uses seat unseat
-- pass_seat follows a leader's lock leaving (released or given back): when
-- hand_over gave it to the candidate of queue entry entry, with fence f,
-- that candidate is seated for hand ms (its value is in the candidates'
-- hash KEYS[9]); otherwise the seat is emptied.
local function pass_seat(t, f, entry, hand, chan)
  if t then
    local v = redis.call('HGET', KEYS[9], entry)
    redis.call('HDEL', KEYS[9], entry)
    if v then
      seat(KEYS[8], chan, f, v, hand)
      return
    end
  end
  unseat(KEYS[8], chan)
end
