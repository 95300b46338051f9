-- Settle one finished request: its tokens reservation corrected to real usage, its spend, its
-- usage bucket, and a budget's soft alert raised once per window.
-- KEYS[1]  tokens window hash: slot -> tokens   (every key shares a {tenant:} tag)
-- KEYS[2]  today's spend    KEYS[3]  this month's spend (pico-USD)
-- KEYS[4]  today's soft-alert flag               KEYS[5]  this month's soft-alert flag
-- KEYS[6]  this hour's usage hash: group field -> amount
-- ARGV[1]  the slot the reservation was charged to, or -1   ARGV[2]  actual - reserved tokens
-- ARGV[3]  cost (pico-USD)   ARGV[4]  day key TTL in ms   ARGV[5]  month key TTL in ms
-- ARGV[6]  daily soft-alert spend or -1   ARGV[7]  monthly soft-alert spend or -1
-- ARGV[8]  usage hash TTL in ms   ARGV[9..]  usage field, amount pairs
-- returns  {day alert raised (0/1), month alert raised (0/1)}
-- The delta goes to the reservation's own slot, never the current one: the window may have
-- moved on, and a slot already out of it (its field gone) needs no correction.
if tonumber(ARGV[1]) >= 0 and ARGV[2] ~= '0' and redis.call('HEXISTS', KEYS[1], ARGV[1]) == 1 then
  redis.call('HINCRBY', KEYS[1], ARGV[1], ARGV[2])
end
local function spend(key, ttl, soft, flag)
  local total = redis.call('INCRBY', key, ARGV[3])
  if redis.call('PTTL', key) < 0 then
    redis.call('PEXPIRE', key, ttl)
  end
  if tonumber(soft) >= 0 and total >= tonumber(soft) then
    if redis.call('SET', flag, '1', 'NX', 'PX', ttl) then
      return 1
    end
  end
  return 0
end
local day = spend(KEYS[2], ARGV[4], ARGV[6], KEYS[4])
local month = spend(KEYS[3], ARGV[5], ARGV[7], KEYS[5])
if #ARGV > 8 then
  for i = 9, #ARGV, 2 do
    redis.call('HINCRBY', KEYS[6], ARGV[i], ARGV[i + 1])
  end
  redis.call('PEXPIRE', KEYS[6], ARGV[8])
end
return {day, month}
