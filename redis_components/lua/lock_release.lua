-- KEYS: 1) the lock  2) its fence counter  3) its waiters ZSET  4) its grant list
-- ARGV: 1) the holder's token  2) the holder's own waiter registration, or ""
--       3) the next holder's lease in ms
-- Returns: 0 when the token does not hold the lock (nothing changes);
--          1 when released with nobody waiting; 2 when handed over to a waiter: the lock
--          is set to a new token ("<holder's first token>:<new fence>", unique because the
--          fence only grows) with the new fence, and "fence lease token" is pushed to the
--          grant list, where the longest-blocked waiter receives it.
local lock, fence, waiters, grant = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local token, registration, lease = ARGV[1], ARGV[2], tonumber(ARGV[3])

if redis.call('GET', lock) ~= token then
  return 0
end
if redis.call('EXISTS', waiters) == 0 then
  redis.call('DEL', lock)
  return 1
end
local time = redis.call('TIME')
local now = time[1] * 1000 + math.floor(time[2] / 1000)
if registration ~= '' then
  redis.call('ZREM', waiters, registration)
end
-- Registrations past their deadline belong to waiters that gave up or died.
redis.call('ZREMRANGEBYSCORE', waiters, '-inf', now)
if redis.call('ZCARD', waiters) == 0 then
  redis.call('DEL', lock)
  return 1
end

-- The next fence, as in lock_acquire.lua (written with %d: a large one stays whole).
local next_fence = redis.call('INCR', fence)
if next_fence == 1 then
  next_fence = tonumber(time[1]) * 1000000 + tonumber(time[2])
  redis.call('SET', fence, string.format('%d', next_fence))
end
redis.call('PEXPIRE', fence, lease + 3600000)
next_fence = string.format('%d', next_fence)
local next_token = string.match(token, '^[^:]*') .. ':' .. next_fence
local expires_at = now + lease
redis.call('SET', lock, next_token, 'PXAT', expires_at)
redis.call('DEL', grant)
redis.call('RPUSH', grant, next_fence .. ' ' .. lease .. ' ' .. next_token)
-- An unclaimed grant lives exactly as long as the lease it carries.
redis.call('PEXPIREAT', grant, expires_at)
return 2
