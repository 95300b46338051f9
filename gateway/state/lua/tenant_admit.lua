-- Admit one request against all of a tenant's limits at once, or change nothing.
-- KEYS[1]  requests window hash: slot -> count       (the three keys share a {tenant:} tag)
-- KEYS[2]  tokens window hash: slot -> tokens
-- KEYS[3]  concurrency lease zset: request id -> lease expiry (unix s)
-- ARGV[1]  current slot          ARGV[2]  oldest slot inside the window
-- ARGV[3]  requests limit or -1  ARGV[4]  token cost    ARGV[5]  tokens limit or -1
-- ARGV[6]  window key TTL in ms
-- ARGV[7]  now (unix s)          ARGV[8]  lease expiry  ARGV[9]  request id
-- ARGV[10] lease set TTL in ms   ARGV[11] concurrency limit or -1
-- returns  0 when admitted (all counted), else 1 requests, 2 tokens, 3 concurrency limited
local function window_total(key, oldest)
  local total = 0
  local slots = redis.call('HGETALL', key)
  for i = 1, #slots, 2 do
    if tonumber(slots[i]) < oldest then
      redis.call('HDEL', key, slots[i])
    else
      total = total + tonumber(slots[i + 1])
    end
  end
  return total
end

local oldest = tonumber(ARGV[2])
local request_limit, cost, token_limit = tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5])
local concurrency_limit = tonumber(ARGV[11])
if request_limit >= 0 and window_total(KEYS[1], oldest) + 1 > request_limit then
  return 1
end
if token_limit >= 0 and window_total(KEYS[2], oldest) + cost > token_limit then
  return 2
end
if concurrency_limit >= 0 then
  redis.call('ZREMRANGEBYSCORE', KEYS[3], '-inf', ARGV[7])
  if redis.call('ZCARD', KEYS[3]) >= concurrency_limit then
    return 3
  end
  redis.call('ZADD', KEYS[3], ARGV[8], ARGV[9])
  if redis.call('PTTL', KEYS[3]) < tonumber(ARGV[10]) then
    redis.call('PEXPIRE', KEYS[3], ARGV[10])
  end
end
if request_limit >= 0 then
  redis.call('HINCRBY', KEYS[1], ARGV[1], 1)
  redis.call('PEXPIRE', KEYS[1], ARGV[6])
end
if token_limit >= 0 then
  redis.call('HINCRBY', KEYS[2], ARGV[1], cost)
  redis.call('PEXPIRE', KEYS[2], ARGV[6])
end
return 0
