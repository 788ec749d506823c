-- KEYS: 1) the queue's ready list (also the name of its wake-up channel)
--       2) the queue's delayed ZSET
-- ARGV: 1) the task payload
--       2) when it is due: "" now, "+<ms>" after ms by the server's clock, "@<ms>" at epoch ms
--       3) the queue's maximum length, 0 for unbounded
-- Returns: 1 when the task was added, 0 when the queue is full (nothing changed)
local limit = tonumber(ARGV[3])
if limit > 0 and redis.call('LLEN', KEYS[1]) + redis.call('ZCARD', KEYS[2]) >= limit then
  return 0
end
local when = ARGV[2]
if when == '' then
  if redis.call('RPUSH', KEYS[1], ARGV[1]) == 1 then
    redis.call('PUBLISH', KEYS[1], 'ready')  -- see queue_push.lua
  end
  return 1
end
local due = tonumber(string.sub(when, 2))
if string.sub(when, 1, 1) == '+' then
  local now = redis.call('TIME')
  due = tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000) + due
end
redis.call('ZADD', KEYS[2], due, ARGV[1])
-- A new earliest due time shortens the sleep of idle workers: wake them to re-read it.
if redis.call('ZRANGE', KEYS[2], 0, 0)[1] == ARGV[1] then
  redis.call('PUBLISH', KEYS[1], 'delayed')
end
return 1
