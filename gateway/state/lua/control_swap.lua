-- Replace one control record if it still holds what the caller read (compare and set).
-- KEYS[1]  the records hash (keys or tenants)
-- KEYS[2]  the control version counter
-- KEYS[3]  the other records hash (its TTL refreshed with the rest)
-- ARGV[1]  the record's field (key id or tenant name)
-- ARGV[2]  the value expected now ('' = absent)
-- ARGV[3]  the new value ('' = delete the record)
-- ARGV[4]  TTL of the three keys in ms
-- returns  the new version, or 0 (nothing written) when the record held something else
local current = redis.call('HGET', KEYS[1], ARGV[1]) or ''
if current ~= ARGV[2] then
  return 0
end
if ARGV[3] == '' then
  redis.call('HDEL', KEYS[1], ARGV[1])
else
  redis.call('HSET', KEYS[1], ARGV[1], ARGV[3])
end
local version = redis.call('INCR', KEYS[2])
for i = 1, 3 do
  redis.call('PEXPIRE', KEYS[i], ARGV[4])
end
return version
