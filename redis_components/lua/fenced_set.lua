-- KEYS: 1) the fenced value (a hash with the fields "fence" and "value")
-- ARGV: 1) the writer's fence token (an integer)  2) the value
-- Returns: 1 when written; 0 when the stored fence is not older than the writer's (nothing
--          changes: a newer holder of the lock has written already)
local stored = redis.call('HGET', KEYS[1], 'fence')
if stored and tonumber(stored) >= tonumber(ARGV[1]) then
  return 0
end
redis.call('HSET', KEYS[1], 'fence', ARGV[1], 'value', ARGV[2])
return 1
