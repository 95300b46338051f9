-- Add a cost to a slotted rate window, optionally only under a limit (see stats/rate.py).
-- KEYS[1]  window hash: slot number -> cost
-- ARGV[1]  current slot
-- ARGV[2]  oldest slot inside the window; older slots are deleted
-- ARGV[3]  cost to add (integer)
-- ARGV[4]  limit on the window's total, or -1 for none
-- ARGV[5]  key TTL in ms
-- returns  {1 if the cost was added else 0, the window's total afterwards}
local oldest = tonumber(ARGV[2])
local total = 0
local slots = redis.call('HGETALL', KEYS[1])
for i = 1, #slots, 2 do
  if tonumber(slots[i]) < oldest then
    redis.call('HDEL', KEYS[1], slots[i])
  else
    total = total + tonumber(slots[i + 1])
  end
end
local cost, limit = tonumber(ARGV[3]), tonumber(ARGV[4])
if limit >= 0 and total + cost > limit then
  return {0, total}
end
redis.call('HINCRBY', KEYS[1], ARGV[1], cost)
redis.call('PEXPIRE', KEYS[1], ARGV[5])
return {1, total + cost}
