-- KEYS: 1) the queue's ready list  2) the queue's delayed ZSET  3) the set of queue names
-- ARGV: 1) the task payload  2) the queue name  3) the queue's wake-up channel
--       4) "ready", "in" (ARGV[5] ms from the server's clock) or "at" (ARGV[5] epoch ms)
--       5) the delay or due time in ms  6) the queue's maximum length, 0 for unbounded
-- Returns: 1 when the task was added, 0 when the queue is full (nothing changed)
local limit = tonumber(ARGV[6])
if limit > 0 and redis.call('LLEN', KEYS[1]) + redis.call('ZCARD', KEYS[2]) >= limit then
  return 0
end
redis.call('SADD', KEYS[3], ARGV[2])
if ARGV[4] == 'ready' then
  -- Only the first task of an empty queue wakes idle workers: a worker that saw the
  -- queue empty is woken by that task, and fetches until the queue is empty again.
  if redis.call('RPUSH', KEYS[1], ARGV[1]) == 1 then
    redis.call('PUBLISH', ARGV[3], 'ready')
  end
  return 1
end
local due = tonumber(ARGV[5])
if ARGV[4] == 'in' then
  local now = redis.call('TIME')
  due = tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000) + due
end
redis.call('ZADD', KEYS[2], due, ARGV[1])
-- A new earliest due time shortens the sleep of idle workers: wake them to re-read it.
if redis.call('ZRANGE', KEYS[2], 0, 0)[1] == ARGV[1] then
  redis.call('PUBLISH', ARGV[3], 'delayed')
end
return 1
