-- KEYS: 1) the worker's in-progress list for the task's queue  2) the queue's dead-letter list
-- ARGV: 1) the task's payload as taken  2) the dead-letter entry
--       3) the most entries the dead-letter list keeps
-- Returns: 1 when the task was dead-lettered, 0 when the in-progress list no longer
--          held it (it was recovered by another worker; nothing changed)
if redis.call('LREM', KEYS[1], -1, ARGV[1]) == 0 then
  return 0
end
redis.call('RPUSH', KEYS[2], ARGV[2])
redis.call('LTRIM', KEYS[2], -tonumber(ARGV[3]), -1)
return 1
