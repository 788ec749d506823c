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
if registration ~= '' then
  redis.call('ZREM', waiters, registration)
end
-- A waiter that gave up dropped its registration; one that died left it until the next
-- waiter registers (or its deadline passes and the set expires): until then, a grant may
-- find nobody blocked and wait for whoever asks next.
if redis.call('ZCARD', waiters) == 0 then
  redis.call('DEL', lock)
  return 1
end

-- The next fence, as in lock_acquire.lua.
local next_fence = redis.call('INCR', fence)
if next_fence == 1 then
  local now = redis.call('TIME')
  next_fence = tonumber(now[1]) * 1000000 + tonumber(now[2])
  redis.call('SET', fence, string.format('%d', next_fence), 'PX', 3600000)
end
next_fence = string.format('%d', next_fence)
local next_token = string.match(token, '^[^:]*') .. ':' .. next_fence
-- The grant expires first (or at the same millisecond): an unclaimed grant never outlives
-- the lease it carries.
redis.call('RPUSH', grant, next_fence .. ' ' .. lease .. ' ' .. next_token)
redis.call('PEXPIRE', grant, lease)
redis.call('SET', lock, next_token, 'PX', lease)
return 2
