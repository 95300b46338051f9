-- Keep an endpoint out of rotation until a time; a shorter cooldown never replaces a longer one.
-- KEYS[1]  health hash: cool_until (unix s)
-- ARGV[1]  requested end of the cooldown (unix s)
-- ARGV[2]  key TTL in ms (only ever extended)
-- returns  the cooldown's end in force (unix s) as a string
local current = tonumber(redis.call('HGET', KEYS[1], 'cool_until')) or 0
if tonumber(ARGV[1]) <= current then
  return string.format('%.17g', current)
end
redis.call('HSET', KEYS[1], 'cool_until', ARGV[1])
if redis.call('PTTL', KEYS[1]) < tonumber(ARGV[2]) then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return ARGV[1]
