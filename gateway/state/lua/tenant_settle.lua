-- Settle a request, at its end or while it streams: its tokens moved from the reservation to
-- the window as they are used, its spend, its usage bucket, its budget hold given back, and a
-- budget's soft alert raised once per window.
-- KEYS[1]  tokens window hash: slot -> tokens   (every key shares a {tenant:} tag)
-- KEYS[2]  today's spend    KEYS[3]  this month's spend (pico-USD)
-- KEYS[4]  today's soft-alert flag               KEYS[5]  this month's soft-alert flag
-- KEYS[6]  this hour's usage hash: group field -> amount
-- KEYS[7]  budget hold zset: "<pico-USD>:<request id>" -> expiry   KEYS[8]  the holds' sum
-- ARGV[1]  the slot the reservation was charged to, or -1   ARGV[2]  tokens refunded from it
-- ARGV[3]  cost (pico-USD)   ARGV[4]  day key TTL in ms   ARGV[5]  month key TTL in ms
-- ARGV[6]  daily soft-alert spend or -1   ARGV[7]  monthly soft-alert spend or -1
-- ARGV[8]  usage hash TTL in ms   ARGV[9]  current slot   ARGV[10]  tokens charged to it
-- ARGV[11] tokens window key TTL in ms    ARGV[12] hold member or ''   ARGV[13] its pico-USD
-- ARGV[14..]  usage field, amount pairs
-- returns  {day alert raised (0/1), month alert raised (0/1)}
-- The refund leaves the reservation's own slot, never the current one, and only while that
-- slot is in the window (its field gone, nothing is left to give back); the tokens used go to
-- the current slot, so a long stream is counted in the windows it runs in.
if tonumber(ARGV[1]) >= 0 and ARGV[2] ~= '0' and redis.call('HEXISTS', KEYS[1], ARGV[1]) == 1 then
  redis.call('HINCRBY', KEYS[1], ARGV[1], -tonumber(ARGV[2]))
end
if ARGV[10] ~= '0' then
  redis.call('HINCRBY', KEYS[1], ARGV[9], ARGV[10])
  redis.call('PEXPIRE', KEYS[1], ARGV[11])
end
if ARGV[12] ~= '' and redis.call('ZREM', KEYS[7], ARGV[12]) == 1 then
  redis.call('DECRBY', KEYS[8], ARGV[13])
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
local day, month = 0, 0
if ARGV[3] ~= '0' or ARGV[6] ~= '-1' or ARGV[7] ~= '-1' then
  day = spend(KEYS[2], ARGV[4], ARGV[6], KEYS[4])
  month = spend(KEYS[3], ARGV[5], ARGV[7], KEYS[5])
end
if #ARGV > 13 then
  for i = 14, #ARGV, 2 do
    redis.call('HINCRBY', KEYS[6], ARGV[i], ARGV[i + 1])
  end
  redis.call('PEXPIRE', KEYS[6], ARGV[8])
end
return {day, month}
