-- KEYS: 1) the HASH of each schedule's next tick (name -> epoch ms)
--       2) the HASH of each schedule's last run (name -> "<tick ms> <task id>")
--       3) the task's queue's ready ZSET (also the name of its wake-up channel)
--       4) the task system's enqueue counter  5) the new task's result hash
-- ARGV: 1) the schedule's name  2) the tick being claimed (epoch ms)
--       3) the tick after it  4) "run": enqueue the task for this tick; "skip": only move on
--       5) the task payload  6) its rank (see queue_enqueue.lua)  7) the new task's id
--       8) how long to keep the result after its last change, in ms
-- Returns: 1 when the tick was claimed (and the task enqueued if "run"), 0 when it was
--          not due yet or another scheduler had claimed it (nothing changed)
-- Claiming and enqueueing are one atomic step: whatever the number of schedulers, and
-- even if one is killed mid-claim, each tick is enqueued once or (when skipped) never.
local time = redis.call('TIME')
local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
local tick = tonumber(ARGV[2])
if tick > now or tonumber(redis.call('HGET', KEYS[1], ARGV[1]) or '-1') ~= tick then
  return 0
end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[3])
if ARGV[4] == 'run' then
  redis.call('ZADD', KEYS[3], tonumber(ARGV[6]) + redis.call('INCR', KEYS[4]), ARGV[5])
  if redis.call('ZCARD', KEYS[3]) == 1 then
    redis.call('PUBLISH', KEYS[3], 'ready')
  end
  redis.call('HSET', KEYS[5], 'status', 'READY', 'message', ARGV[5], 'enqueued_at', now)
  redis.call('PEXPIRE', KEYS[5], tonumber(ARGV[8]))
  redis.call('HSET', KEYS[2], ARGV[1], tick .. ' ' .. ARGV[7])
end
return 1
