-- KEYS: 1) the HASH of running tasks (task id -> its attempts, see lib/attempts.lua)
--       2) the worker's in-progress ZSET of the task's queue  3) the queue's ready ZSET
--       (also the name of its wake-up channel)
-- ARGV: 1) the worker's id  2) the payload of a task it holds ahead (see
--       queue_fetch.lua)  3) its id ("" when unknown)  4) when the worker took it (the
--       server's ms, as queue_fetch.lua returned it)  5) its queue's name
-- Returns: 1 when the task went back to its queue, with its rank and no attempt
--          counted, 0 when the worker no longer held it ahead (nothing changed)
-- A worker gives back the task it took ahead when the task it runs lasts, so that
-- other workers can run it meanwhile: it goes back where it was, and wakes them.
-- @include keys
-- @include attempts
-- @include limits
local score = redis.call('ZSCORE', KEYS[2], ARGV[2])
if not score or tonumber(score) >= 0 then
  return 0
end
redis.call('ZREM', KEYS[2], ARGV[2])
if ARGV[3] ~= '' then
  attempts_remove(KEYS[1], ARGV[3], redis.call('HGET', KEYS[1], ARGV[3]),
    attempt_of(ARGV[4] .. ' ' .. ARGV[1], ARGV[1]))
end
local limits = ARGV[3] ~= '' and limits_of(ARGV[2])
if limits then  -- it was taken with its permits: they go to the tasks waiting for them
  limits_release(keys_base(KEYS[3], 'ready:' .. ARGV[5]), limits, ARGV[3])
end
local was_empty = redis.call('ZCARD', KEYS[3]) == 0
redis.call('ZADD', KEYS[3], -tonumber(score), ARGV[2])
if was_empty then
  redis.call('PUBLISH', KEYS[3], 'ready')
end
return 1
