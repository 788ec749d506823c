-- KEYS: 1) the lock  2) its fence counter  3) its waiters ZSET (token -> registration deadline, ms)
--       4) its grant list (at most one "fence lease token" handed over by a release)
-- ARGV: 1) the caller's token  2) the lease in ms  3) how long to register the caller as a
--       waiter if the lock is taken, in ms (0: do not wait, and drop any earlier registration)
-- Returns: {1, token, fence, lease_ms} when the caller now holds the lock (its own token, or
--          the token of a grant that nobody was blocked to receive);
--          {0, "", 0, pttl_ms} when someone else holds it.
local lock, fence, waiters, grant = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local token, lease, wait = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])

-- The next fence of this name (the same step is in lock_release.lua). The counter expires
-- an hour after the lease it was last used for, so names used once leave nothing behind;
-- a counter that is new or expired starts from the server's clock in microseconds, above
-- every fence it gave before (unless that clock went back by more than the hour).
local function next_fence()
  local value = redis.call('INCR', fence)
  if value == 1 then
    local now = redis.call('TIME')
    value = tonumber(now[1]) * 1000000 + tonumber(now[2])
    redis.call('SET', fence, string.format('%d', value))
  end
  redis.call('PEXPIRE', fence, lease + 3600000)
  return value
end

if redis.call('SET', lock, token, 'NX', 'PX', lease) then
  -- The lock was free, so a grant still listed belongs to a lease that expired.
  redis.call('DEL', grant)
  if redis.call('EXISTS', waiters) == 1 then
    redis.call('ZREM', waiters, token)
  end
  return {1, token, next_fence(), lease}
end

local pending = redis.call('LPOP', grant)
if pending then
  redis.call('ZREM', waiters, token)
  local granted_fence, granted_token = string.match(pending, '^(%d+) %d+ (.+)$')
  return {1, granted_token, tonumber(granted_fence), redis.call('PTTL', lock)}
end

if wait > 0 then
  local now = redis.call('TIME')
  redis.call('ZADD', waiters, now[1] * 1000 + math.floor(now[2] / 1000) + wait, token)
  if redis.call('PTTL', waiters) < wait then
    redis.call('PEXPIRE', waiters, wait)
  end
else
  redis.call('ZREM', waiters, token)
end
return {0, '', 0, redis.call('PTTL', lock)}
