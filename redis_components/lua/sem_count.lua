-- KEYS: 1) the holders ZSET
-- ARGV: 1) the permit timeout in ms
-- Returns: the number of permits held and not expired, by the server's clock
local time = redis.call('TIME')
local now = time[1] * 1000 + math.floor(time[2] / 1000)
return redis.call('ZCOUNT', KEYS[1], '(' .. (now - tonumber(ARGV[1])), '+inf')
