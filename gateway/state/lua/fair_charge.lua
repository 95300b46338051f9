-- Charge a class's fairness counters and read them back: policies/fair_share.py `charged`.
-- KEYS[1]  tokens hash: fairness key -> weighted served tokens
-- KEYS[2]  seen hash: fairness key -> when last charged (unix s)
-- ARGV[1]  now (unix s)
-- ARGV[2]  active_s: a key charged since now - active_s is active
-- ARGV[3]  forget_s: a key not charged since now - forget_s is deleted
-- ARGV[4]  key TTL in ms (both hashes)
-- ARGV[5..] pairs: fairness key, weighted tokens to add (negative corrects an estimate)
-- returns  {key, tokens, seen, key, tokens, seen, ...} for every key kept, as strings
local now = tonumber(ARGV[1])
local since = now - tonumber(ARGV[2])
local tokens, seen = {}, {}
local flat = redis.call('HGETALL', KEYS[1])
for i = 1, #flat, 2 do tokens[flat[i]] = tonumber(flat[i + 1]) end
flat = redis.call('HGETALL', KEYS[2])
for i = 1, #flat, 2 do seen[flat[i]] = tonumber(flat[i + 1]) end
-- floor: the least active counter, else the largest known
local lowest, highest = nil, nil
for key, value in pairs(tokens) do
  if (seen[key] or 0) >= since then
    if lowest == nil or value < lowest then lowest = value end
  end
  if highest == nil or value > highest then highest = value end
end
local floor = lowest or highest or 0
for i = 5, #ARGV, 2 do
  local key, amount = ARGV[i], tonumber(ARGV[i + 1])
  local value = tokens[key] or 0
  if (seen[key] or -1) < since and value < floor then value = floor end
  tokens[key] = value + amount
  seen[key] = now
  redis.call('HSET', KEYS[1], key, string.format('%.17g', tokens[key]))
  redis.call('HSET', KEYS[2], key, string.format('%.17g', now))
end
local forget = now - tonumber(ARGV[3])
local out = {}
for key, value in pairs(tokens) do
  if (seen[key] or 0) < forget then
    redis.call('HDEL', KEYS[1], key)
    redis.call('HDEL', KEYS[2], key)
  else
    out[#out + 1] = key
    out[#out + 1] = string.format('%.17g', value)
    out[#out + 1] = string.format('%.17g', seen[key])
  end
end
if #ARGV > 4 then
  redis.call('PEXPIRE', KEYS[1], ARGV[4])
  redis.call('PEXPIRE', KEYS[2], ARGV[4])
end
return out
