-- Write a stored response's owner into its tenant's owner map: create-only or update-only.
-- KEYS[1]  hash: response id -> "<expiry, unix ms>:<owner JSON>"
-- KEYS[2]  zset: response id -> when it was created (unix ms), the order of eviction
-- ARGV[1]  response id
-- ARGV[2]  owner JSON
-- ARGV[3]  now (unix ms): an owner whose expiry is at or before it is no longer there
-- ARGV[4]  expiry (unix ms) of an owner created now
-- ARGV[5]  the most owners the tenant keeps: the oldest beyond it are evicted
-- ARGV[6]  1: create (only where none is live), 0: update (only a live one, keeping its expiry)
-- ARGV[7]  key TTL in ms: the map lives at least as long as its newest owner
-- returns  1 if written, else 0
local old = redis.call('HGET', KEYS[1], ARGV[1])
local expiry = old and string.match(old, '^(%d+):') or nil
local live = expiry ~= nil and tonumber(expiry) > tonumber(ARGV[3])
if live == (ARGV[6] == '1') then
  return 0
end
if not live then
  expiry = ARGV[4]
  redis.call('ZADD', KEYS[2], ARGV[3], ARGV[1])
end
redis.call('HSET', KEYS[1], ARGV[1], expiry .. ':' .. ARGV[2])
local over = redis.call('ZCARD', KEYS[2]) - tonumber(ARGV[5])
if over > 0 then
  for _, id in ipairs(redis.call('ZRANGE', KEYS[2], 0, over - 1)) do
    redis.call('HDEL', KEYS[1], id)
  end
  redis.call('ZREMRANGEBYRANK', KEYS[2], 0, over - 1)
end
for i = 1, 2 do
  if redis.call('PTTL', KEYS[i]) < tonumber(ARGV[7]) then
    redis.call('PEXPIRE', KEYS[i], ARGV[7])
  end
end
return 1
