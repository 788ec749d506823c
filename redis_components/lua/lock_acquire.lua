-- KEYS: 1) the lock  2) its fence counter  3) its waiters ZSET (token -> registration deadline, ms)
--       4) its grant list (at most one "fence lease token" handed over by a release)
-- ARGV: 1) the caller's token  2) the lease in ms  3) how long to register the caller as a
--       waiter if the lock is taken, in ms (0: do not wait)  4) "1" when an earlier try of
--       this caller registered it (a caller that stops waiting drops its registration)
--       5) how long the waiters ZSET lives after a registration, in ms (the longest one)
-- Returns: {1, token, fence, lease_ms} when the caller now holds the lock (its own token, or
--          the token of a grant that nobody was blocked to receive);
--          {0, "", 0, pttl_ms} when someone else holds it.
local lock, fence, waiters, grant = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local token, lease, wait = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])
local registered, waiters_ttl = ARGV[4] == '1', ARGV[5]

-- The next fence of this name (the same step is in lock_release.lua). A new counter starts
-- from the server's clock in microseconds and expires an hour later: the next one starts
-- above every fence this one gave, since no name is granted a million times a second
-- (unless that clock went back by nearly the hour). Names used once leave nothing behind.
local function next_fence()
  local value = redis.call('INCR', fence)
  if value == 1 then
    local now = redis.call('TIME')
    value = tonumber(now[1]) * 1000000 + tonumber(now[2])
    redis.call('SET', fence, string.format('%d', value), 'PX', 3600000)
  end
  return value
end

-- A grant expires no later than the lease it carries, so a free lock has none pending.
if redis.call('SET', lock, token, 'NX', 'PX', lease) then
  if registered then
    redis.call('ZREM', waiters, token)
  end
  return {1, token, next_fence(), lease}
end

local pending = redis.call('LPOP', grant)
if pending then
  if registered then
    redis.call('ZREM', waiters, token)
  end
  local granted_fence, granted_token = string.match(pending, '^(%d+) %d+ (.+)$')
  return {1, granted_token, tonumber(granted_fence), redis.call('PTTL', lock)}
end

if wait > 0 then
  local time = redis.call('TIME')
  local now = time[1] * 1000 + math.floor(time[2] / 1000)
  -- Registrations past their deadline belong to waiters that died.
  redis.call('ZREMRANGEBYSCORE', waiters, '-inf', now)
  redis.call('ZADD', waiters, now + wait, token)
  redis.call('PEXPIRE', waiters, waiters_ttl)
elseif registered then
  redis.call('ZREM', waiters, token)
end
return {0, '', 0, redis.call('PTTL', lock)}
