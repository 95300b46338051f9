-- Apply one outcome to an endpoint's shared circuit breaker: stats/breaker.py `after_result`.
-- KEYS[1]  health hash: fails, open_until, trial_until (cool_until is left alone)
-- ARGV[1]  now (unix s)
-- ARGV[2]  1 for a success, 0 for a failure
-- ARGV[3]  failure threshold
-- ARGV[4]  cooldown (s)
-- ARGV[5]  key TTL in ms (only ever extended)
-- returns  {failures, open_until, trial_until} as strings
local now = tonumber(ARGV[1])
local state = redis.call('HMGET', KEYS[1], 'fails', 'open_until', 'trial_until')
local fails = tonumber(state[1]) or 0
local open_until = tonumber(state[2]) or 0
local trial_until = tonumber(state[3]) or 0
local phase = 'closed'
if open_until ~= 0 then
  phase = (now < open_until) and 'open' or 'half_open'
end
if ARGV[2] == '1' then
  if phase == 'open' then
    return {tostring(fails), string.format('%.17g', open_until), string.format('%.17g', trial_until)}
  end
  redis.call('HDEL', KEYS[1], 'fails', 'open_until', 'trial_until')
  return {'0', '0', '0'}
end
fails = fails + 1
if phase == 'half_open' or (phase == 'closed' and fails >= tonumber(ARGV[3])) then
  open_until = now + tonumber(ARGV[4])
  trial_until = 0
end
local state_out = {tostring(fails), string.format('%.17g', open_until), string.format('%.17g', trial_until)}
redis.call('HSET', KEYS[1], 'fails', state_out[1], 'open_until', state_out[2], 'trial_until', state_out[3])
if redis.call('PTTL', KEYS[1]) < tonumber(ARGV[5]) then
  redis.call('PEXPIRE', KEYS[1], ARGV[5])
end
return state_out
