-- Add one finished request's sums to a latency time bucket (see stats/window.py).
-- KEYS[1]  latency bucket hash: field -> sum
-- ARGV[1]  key TTL in ms (the window plus one bucket)
-- ARGV[2..] field, increment, field, increment, ...
-- returns  the number of fields updated
for i = 2, #ARGV, 2 do
  redis.call('HINCRBYFLOAT', KEYS[1], ARGV[i], ARGV[i + 1])
end
redis.call('PEXPIRE', KEYS[1], ARGV[1])
return (#ARGV - 1) / 2
