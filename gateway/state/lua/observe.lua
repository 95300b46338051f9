-- Add one sample's sums to a latency time bucket and to a fast-window bucket (see
-- state/window.py), atomically: a read never sees one without the other.
-- KEYS[1]  latency bucket hash: field -> sum
-- KEYS[2]  fast-window bucket hash: field -> sum (same endpoint, so the same hash slot)
-- ARGV[1]  KEYS[1]'s TTL in ms (the window plus one bucket)
-- ARGV[2]  KEYS[2]'s TTL in ms (the fast window plus one bucket)
-- ARGV[3]  how many field, increment pairs follow for KEYS[1] (the rest are for KEYS[2])
-- ARGV[4..] field, increment, ... for KEYS[1], then field, increment, ... for KEYS[2]
-- returns  the number of fields updated
local split = 3 + 2 * tonumber(ARGV[3])
for i = 4, split, 2 do
  redis.call('HINCRBYFLOAT', KEYS[1], ARGV[i], ARGV[i + 1])
end
redis.call('PEXPIRE', KEYS[1], ARGV[1])
if #ARGV > split then
  for i = split + 1, #ARGV, 2 do
    redis.call('HINCRBYFLOAT', KEYS[2], ARGV[i], ARGV[i + 1])
  end
  redis.call('PEXPIRE', KEYS[2], ARGV[2])
end
return (#ARGV - 3) / 2
