-- KEYS: 1) the worker's in-progress list for the task's queue  2) the queue's delayed ZSET
--       3) the queue's ready list (the name of its wake-up channel)
-- ARGV: 1) the task's payload as taken  2) its new payload  3) the delay in ms
-- Returns: 1 when the task was moved to the delayed ZSET, 0 when the in-progress list no
--          longer held it (it was recovered by another worker; nothing changed)
if redis.call('LREM', KEYS[1], -1, ARGV[1]) == 0 then
  return 0
end
local now = redis.call('TIME')
local due = tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000) + tonumber(ARGV[3])
redis.call('ZADD', KEYS[2], due, ARGV[2])
if redis.call('ZRANGE', KEYS[2], 0, 0)[1] == ARGV[2] then
  redis.call('PUBLISH', KEYS[3], 'delayed')
end
return 1
