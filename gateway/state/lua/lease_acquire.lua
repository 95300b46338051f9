-- Take (or refresh) a lease in a lease set, optionally under a limit.
-- KEYS[1]  lease zset: request id -> lease expiry (unix s)
-- ARGV[1]  now (unix s): leases expiring at or before it are dropped first
-- ARGV[2]  this lease's expiry (unix s)
-- ARGV[3]  request id
-- ARGV[4]  key TTL in ms: the set lives at least as long as its newest lease
-- ARGV[5]  limit on live leases, or -1 for none
-- returns  {1 if the lease is held else 0, live lease count}
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', ARGV[1])
local limit = tonumber(ARGV[5])
local count = redis.call('ZCARD', KEYS[1])
if limit >= 0 and count >= limit and not redis.call('ZSCORE', KEYS[1], ARGV[3]) then
  return {0, count}
end
redis.call('ZADD', KEYS[1], ARGV[2], ARGV[3])
if redis.call('PTTL', KEYS[1]) < tonumber(ARGV[4]) then
  redis.call('PEXPIRE', KEYS[1], ARGV[4])
end
return {1, redis.call('ZCARD', KEYS[1])}
