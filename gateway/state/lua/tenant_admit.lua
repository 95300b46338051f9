-- Admit one request against all of a tenant's limits and its budget at once, or change nothing.
-- KEYS[1]  requests window hash: slot -> count       (every key shares a {tenant:} tag)
-- KEYS[2]  tokens window hash: slot -> tokens
-- KEYS[3]  concurrency lease zset: request id -> lease expiry (unix s)
-- KEYS[4]  today's spend (pico-USD)   KEYS[5]  this month's spend (pico-USD)
-- KEYS[6]  budget hold zset: "<pico-USD>:<request id>" -> hold expiry (unix s)
-- KEYS[7]  the sum of the live holds' pico-USD
-- ARGV[1]  current slot          ARGV[2]  oldest slot inside the window
-- ARGV[3]  requests limit or -1  ARGV[4]  token cost    ARGV[5]  tokens limit or -1
-- ARGV[6]  window key TTL in ms
-- ARGV[7]  now (unix s)          ARGV[8]  lease and hold expiry  ARGV[9]  request id
-- ARGV[10] lease and hold set TTL in ms   ARGV[11] concurrency limit or -1
-- ARGV[12] daily budget or -1    ARGV[13] monthly budget or -1 (pico-USD)
-- ARGV[14] this request's hold (pico-USD, 0 for none)   ARGV[15] its hold member
-- returns  {verdict, requests in window, tokens in window, oldest used requests slot or -1,
--           oldest used tokens slot or -1, today's spend, month's spend}; the verdict is 0 when
--           admitted (all counted), else 1 requests, 2 tokens, 3 concurrency, 4 budget: the
--           spend plus the live holds leave less than this request's hold
local function window_total(key, oldest)
  local total, first = 0, -1
  local slots = redis.call('HGETALL', key)
  for i = 1, #slots, 2 do
    local slot = tonumber(slots[i])
    if slot < oldest then
      redis.call('HDEL', key, slots[i])
    else
      local count = tonumber(slots[i + 1])
      total = total + count
      if count > 0 and (first < 0 or slot < first) then
        first = slot
      end
    end
  end
  return total, first
end

-- The live holds' sum, the expired ones (a crashed replica's) dropped from it first.
local function held_total()
  local expired = redis.call('ZRANGEBYSCORE', KEYS[6], '-inf', ARGV[7])
  if #expired > 0 then
    local gone = 0
    for _, member in ipairs(expired) do
      gone = gone + tonumber(string.match(member, '^(%d+):'))
    end
    redis.call('ZREM', KEYS[6], unpack(expired))
    redis.call('DECRBY', KEYS[7], gone)
  end
  return math.max(0, tonumber(redis.call('GET', KEYS[7]) or '0'))
end

local oldest = tonumber(ARGV[2])
local request_limit, cost, token_limit = tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5])
local concurrency_limit = tonumber(ARGV[11])
local day_limit, month_limit = tonumber(ARGV[12]), tonumber(ARGV[13])
local hold = tonumber(ARGV[14])
local requests, requests_first, tokens, tokens_first = 0, -1, 0, -1
if request_limit >= 0 then
  requests, requests_first = window_total(KEYS[1], oldest)
end
if token_limit >= 0 then
  tokens, tokens_first = window_total(KEYS[2], oldest)
end
local day_spend = redis.call('GET', KEYS[4]) or '0'
local month_spend = redis.call('GET', KEYS[5]) or '0'
local function reply(verdict)
  return {verdict, requests, tokens, requests_first, tokens_first, day_spend, month_spend}
end

if request_limit >= 0 and requests + 1 > request_limit then
  return reply(1)
end
if token_limit >= 0 and tokens + cost > token_limit then
  return reply(2)
end
if day_limit >= 0 or month_limit >= 0 then
  local committed = held_total()
  local function over(limit, spent)
    local taken = tonumber(spent) + committed
    return limit >= 0 and (taken >= limit or taken + hold > limit)
  end
  if over(day_limit, day_spend) or over(month_limit, month_spend) then
    return reply(4)
  end
end
if concurrency_limit >= 0 then
  redis.call('ZREMRANGEBYSCORE', KEYS[3], '-inf', ARGV[7])
  if redis.call('ZCARD', KEYS[3]) >= concurrency_limit then
    return reply(3)
  end
  redis.call('ZADD', KEYS[3], ARGV[8], ARGV[9])
  if redis.call('PTTL', KEYS[3]) < tonumber(ARGV[10]) then
    redis.call('PEXPIRE', KEYS[3], ARGV[10])
  end
end
if hold > 0 then
  redis.call('ZADD', KEYS[6], ARGV[8], ARGV[15])
  redis.call('INCRBY', KEYS[7], hold)
  for i = 6, 7 do
    if redis.call('PTTL', KEYS[i]) < tonumber(ARGV[10]) then
      redis.call('PEXPIRE', KEYS[i], ARGV[10])
    end
  end
end
local current = tonumber(ARGV[1])
if request_limit >= 0 then
  redis.call('HINCRBY', KEYS[1], ARGV[1], 1)
  redis.call('PEXPIRE', KEYS[1], ARGV[6])
  requests = requests + 1
  if requests_first < 0 then requests_first = current end
end
if token_limit >= 0 then
  redis.call('HINCRBY', KEYS[2], ARGV[1], cost)
  redis.call('PEXPIRE', KEYS[2], ARGV[6])
  tokens = tokens + cost
  if tokens_first < 0 and cost > 0 then tokens_first = current end
end
return reply(0)
