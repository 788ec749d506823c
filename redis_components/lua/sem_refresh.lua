-- KEYS: 1) the holders ZSET  2) the owners ZSET
-- ARGV: 1) the permit's token  2) the permit timeout in ms
-- Returns: 1 when the permit was still valid and now counts from now again; 0 when it had
--          expired (it is then removed from both ZSETs, leaving no trace).
local holders, owners = KEYS[1], KEYS[2]
local token, timeout = ARGV[1], tonumber(ARGV[2])
local time = redis.call('TIME')
local now = time[1] * 1000 + math.floor(time[2] / 1000)
local score = redis.call('ZSCORE', holders, token)
if score and tonumber(score) > now - timeout then
  redis.call('ZADD', holders, 'XX', now, token)
  return 1
end
redis.call('ZREM', holders, token)
redis.call('ZREM', owners, token)
return 0
