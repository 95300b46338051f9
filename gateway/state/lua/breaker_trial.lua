-- Claim the single half-open trial of an endpoint's breaker: stats/breaker.py `after_trial_claim`.
-- KEYS[1]  health hash: open_until, trial_until
-- ARGV[1]  now (unix s)
-- ARGV[2]  trial timeout (s): an unfinished trial may be claimed again after it
-- ARGV[3]  key TTL in ms (only ever extended)
-- returns  1 if this caller holds the trial, else 0
local now = tonumber(ARGV[1])
local state = redis.call('HMGET', KEYS[1], 'open_until', 'trial_until')
local open_until = tonumber(state[1]) or 0
local trial_until = tonumber(state[2]) or 0
if open_until == 0 or now < open_until or trial_until > now then
  return 0
end
redis.call('HSET', KEYS[1], 'trial_until', string.format('%.17g', now + tonumber(ARGV[2])))
if redis.call('PTTL', KEYS[1]) < tonumber(ARGV[3]) then
  redis.call('PEXPIRE', KEYS[1], ARGV[3])
end
return 1
