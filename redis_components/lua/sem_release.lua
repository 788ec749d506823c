-- KEYS: 1) the holders ZSET  2) the owners ZSET  3) the counter  4) the waiters ZSET
--       5) the grant list (see sem_acquire.lua)
-- ARGV: 1) the permit's token  2) the limit  3) the permit timeout in ms
--       4) 1 for a fair semaphore, 0 for a basic one
--       5) a fresh prefix for the tokens of permits handed to waiters
-- Returns: 1 when the permit was held and is released; 0 when it had expired already.
--          Either way, free permits then go to waiters: a fair semaphore hands each one
--          over ("counter token" pushed to the grant list, where the longest-blocked
--          waiter receives it); a basic one pushes "wake" signals and waiters compete.
local holders, owners, counter, waiters, grant = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local token, limit, timeout = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])
local fair, prefix = ARGV[4] == '1', ARGV[5]

local time = redis.call('TIME')
local now = time[1] * 1000 + math.floor(time[2] / 1000)

local score = redis.call('ZSCORE', holders, token)
local removed = (score and tonumber(score) > now - timeout) and 1 or 0
redis.call('ZREM', holders, token)
local expired = redis.call('ZREMRANGEBYSCORE', holders, '-inf', now - timeout)
if fair then
  redis.call('ZREM', owners, token)
  -- Owners follow holders (the book's ZINTERSTORE) when other permits expired.
  if expired > 0 then
    redis.call('ZINTERSTORE', owners, 2, owners, holders, 'WEIGHTS', 1, 0)
  end
end
if redis.call('EXISTS', waiters) == 0 then
  return removed
end
redis.call('ZREMRANGEBYSCORE', waiters, '-inf', now)

local free = limit - redis.call('ZCARD', holders)
local handed = 0
while free > handed and redis.call('ZCARD', waiters) > redis.call('LLEN', grant) do
  handed = handed + 1
  if fair then
    local granted = prefix .. ':' .. handed
    local value = redis.call('INCR', counter)
    redis.call('ZADD', holders, now, granted)
    redis.call('ZADD', owners, value, granted)
    redis.call('RPUSH', grant, value .. ' ' .. granted)
  else
    redis.call('RPUSH', grant, 'wake')
  end
end
if handed > 0 and redis.call('PTTL', grant) == -1 then
  -- An unclaimed grant lives no longer than the permit it carries.
  redis.call('PEXPIRE', grant, timeout)
end
return removed
