-- Claim the due ticks of several schedules in one step (one call per scheduler wake-up).
-- KEYS: 1) the HASH of each schedule's next tick (name -> epoch ms)
--       2) the HASH of each schedule's last run (name -> "<tick ms> <task id>")
--       3) the enqueue counter of the registry's home
--       then for each claim: its task's queue's ready ZSET (also the name of its wake-up
--       channel), and the new task's result hash (for a claim that is not "run": any
--       two keys of the registry's home)
-- ARGV: 1) how long to keep a result after its last change, in ms
--       then 8 for each claim: the schedule's name, the tick being claimed (epoch ms),
--       the tick after it, "run" (enqueue the task for this tick), "ran" (its task was
--       enqueued in its queue's own home: only record it) or "skip" (only move on), the
--       task payload, its rank (see lib/queue.lua), the new task's id, and its queue to
--       count it in the metrics' tasks added ("": not counted)
-- Returns: for each claim, 1 when the tick was claimed (and its task enqueued if "run"),
--          0 when it was not due yet or another scheduler had claimed it (nothing changed)
-- Claiming and enqueueing are one atomic step: whatever the number of schedulers, and
-- even if one is killed mid-claim, each tick is enqueued once or (when skipped) never.
-- A task whose queue has a home of its own is enqueued there first, refused when it
-- was already (its id is the tick's), and then claimed "ran" here: a scheduler killed
-- between the two leaves the tick due, and the next one's enqueue is refused.
-- @include keys
-- @include queue
local now = queue_now()
local ttl = tonumber(ARGV[1])
local totals = keys_name(keys_base(KEYS[3], 'counter'), 'totals')
local claimed = {}
for i = 0, (#ARGV - 1) / 8 - 1 do
  local name, tick = ARGV[2 + i * 8], tonumber(ARGV[3 + i * 8])
  local ready, result = KEYS[4 + i * 2], KEYS[5 + i * 2]
  if tick > now or tonumber(redis.call('HGET', KEYS[1], name) or '-1') ~= tick then
    claimed[i + 1] = 0
  else
    redis.call('HSET', KEYS[1], name, ARGV[4 + i * 8])
    local action = ARGV[5 + i * 8]
    if action == 'run' then
      local payload = queue_stamp(ARGV[6 + i * 8], now)
      queue_ready(ready, KEYS[3], tonumber(ARGV[7 + i * 8]), payload)
      queue_result(result, payload, now, ttl)
      if ARGV[9 + i * 8] ~= '' then
        redis.call('HINCRBY', totals, ARGV[9 + i * 8] .. ':added', 1)
      end
    end
    if action ~= 'skip' then
      redis.call('HSET', KEYS[2], name, tick .. ' ' .. ARGV[8 + i * 8])
    end
    claimed[i + 1] = 1
  end
end
return claimed
