-- KEYS: 1) the holders ZSET (permit token -> server time in ms of its acquisition or refresh)
--       2) the owners ZSET (permit token -> counter value; fair semaphores only)
--       3) the counter  4) the waiters ZSET (token -> registration deadline, ms)
--       5) the grant list (fair: "counter token" grants handed over by a release; basic:
--          "wake" signals)
-- ARGV: 1) the caller's token  2) the limit  3) the permit timeout in ms
--       4) how long to register the caller as a waiter if full, in ms (0: do not wait, and
--          drop any earlier registration)  5) 1 for a fair semaphore, 0 for a basic one
--       6) a fresh prefix for the tokens of permits handed to waiters
-- Returns: {1, token, counter} when the caller now holds a permit (its own token, or that
--          of a grant nobody was blocked to receive); {0, "", retry_ms} when full, with the
--          time until the oldest permit expires.
local holders, owners, counter, waiters, grant = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local token, limit, timeout = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])
local wait, fair, prefix = tonumber(ARGV[4]), ARGV[5] == '1', ARGV[6]

local time = redis.call('TIME')
local now = time[1] * 1000 + math.floor(time[2] / 1000)

-- Expired permits and registrations go first; owners follow holders (the book's
-- ZINTERSTORE, needed only when a permit expired: every other removal takes both).
local expired = redis.call('ZREMRANGEBYSCORE', holders, '-inf', now - timeout)
redis.call('ZREMRANGEBYSCORE', waiters, '-inf', now)
local registered = redis.call('ZSCORE', waiters, token)
local others = redis.call('ZCARD', waiters) - (registered and 1 or 0)
-- A fair semaphore serves those already waiting before a newcomer.
local queue_first = fair and others > 0 and not registered

if fair then
  if expired > 0 then
    redis.call('ZINTERSTORE', owners, 2, owners, holders, 'WEIGHTS', 1, 0)
  end
  local pending = not queue_first and redis.call('LPOP', grant)
  if pending then
    redis.call('ZREM', waiters, token)
    local granted_counter, granted_token = string.match(pending, '^(%d+) (.+)$')
    return {1, granted_token, tonumber(granted_counter)}
  end
end

if not queue_first and redis.call('ZCARD', holders) < limit then
  redis.call('ZADD', holders, now, token)
  local value = 0
  if fair then
    value = redis.call('INCR', counter)
    redis.call('ZADD', owners, value, token)
  end
  if registered then
    redis.call('ZREM', waiters, token)
  end
  return {1, token, value}
end

if queue_first then
  local handed = 0
  while redis.call('ZCARD', holders) < limit and others > redis.call('LLEN', grant) do
    -- each permit added to holders here goes to one of the others, through the grant list
    handed = handed + 1
    local granted = prefix .. ':' .. handed
    local value = redis.call('INCR', counter)
    redis.call('ZADD', holders, now, granted)
    redis.call('ZADD', owners, value, granted)
    redis.call('RPUSH', grant, value .. ' ' .. granted)
  end
  -- An unclaimed grant lives no longer than the permit it carries.
  if redis.call('PTTL', grant) == -1 then
    redis.call('PEXPIRE', grant, timeout)
  end
end

if wait > 0 then
  redis.call('ZADD', waiters, now + wait, token)
  if redis.call('PTTL', waiters) < wait then
    redis.call('PEXPIRE', waiters, wait)
  end
elseif registered then
  redis.call('ZREM', waiters, token)
end
local oldest = redis.call('ZRANGE', holders, 0, 0, 'WITHSCORES')
local retry = 0
if oldest[2] then
  retry = math.max(tonumber(oldest[2]) + timeout - now, 0)
end
return {0, '', retry}
