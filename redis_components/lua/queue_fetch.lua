-- KEYS: 1) the ZSET of worker leases  2) the HASH of running tasks (task id -> its
--       attempts, see lib/attempts.lua)  3) the enqueue counter of the queues' home
--       4) the result hash of the finished task, or any key of the task system when
--       there is none  5) the per-minute counts (HASH) of the finished task's queue for
--       this hour  6) the HASH of running totals for metrics; then a lane for each
--       queue the worker serves, in priority order (lib/queue.lua's queue_lane): its
--       ready ZSET (also the name of its wake-up channel), its delayed ZSET, the
--       worker's in-progress ZSET for it, its dead-letter list; then the finished task's workflow section (lib/flow.lua), if
--       it is a workflow's step
-- ARGV: 1) the options (JSON, below)  2) the finished task's payload as taken
--       3) its outcome's data: the return value (JSON) for "ok", the error (a JSON
--       object) for "retry" and "bury"  4) "retry", "defer": the payload to run again
--       5) "bury": the dead-letter entry  6) its step's argument (lib/flow.lua's
--       flow_open)  7) the payload of the task held ahead that starts now
-- Options (JSON; a field that is false, 0 or "" may be left out): "worker" (its id);
--       "take" (take a task); "move" (move due delayed tasks to their queues); "ahead"
--       (the task taken is held ahead, not started: its score in the in-progress ZSET
--       is negated until a later call starts it, and recovery counts no crash against
--       it); "now" (the server's time as the worker reckons it from the clock an
--       earlier call read: the time, and no clock is read) or "floor" (the same, but
--       the clock is read, and the time never goes below it); "limits" (the
--       TASK_LIMITS setting as lib/limit_settings.lua reads it); "metrics" (counts for
--       metrics.py); "keep" (how long to keep a result after its last change, in ms).
--       A finished task to record: "done" (its lane, 1-based), "id" (none: no result
--       is written), "outcome" ("ok", "retry", "defer", "bury" or "cancel":
--       terminated), "delay_ms" (retry, defer: in how many ms), "dead_max" (bury: the
--       most entries a dead-letter list keeps), "queue", "bucket" and "micros" (with
--       metrics: its queue, the upper bound of its duration's histogram bucket, its
--       duration in µs), "wait" (with metrics, a first attempt's wait in its queue:
--       "<its histogram bucket> <ms>"), "attempt" (required: when the worker took it,
--       the server's ms as this script returned it: the outcome is recorded only if
--       that take is still the task's current attempt), "first" (its first attempt for
--       sure: its result has no earlier attempt to read), "flow_keys" (how many keys at the end of KEYS are its workflow
--       section), "carried" (the ids of steps whose outcomes the worker carried from
--       this home's outbox, their entries deleted when the finished task is a step of
--       this home's), "metadata" (its metadata to save, JSON, when its run changed it),
--       "progress" (its progress not saved yet, lib/result.lua's result_progress).
--       A task held ahead that starts now: "start" (its lane), "start_score" (its
--       score as the take returned it).
-- Returns: {payload, its lane, wait, recorded, now, score, read}: payload is false
--          when no task was taken; wait is the number of ms until the next delayed task
--          is due (0 when more are due now, -1 when none is or nothing was moved), or
--          when the take set tasks aside on their limits (lib/limits.lua), until the
--          first start one of them booked (0: call again at once);
--          recorded is 1 when the finished task was recorded, 0 when the worker no
--          longer held it (it was recovered meanwhile, and nothing changed); now is the
--          server's time (epoch ms), as "now" or "floor" say; score is the taken
--          task's score in its queue; read is the server's clock as this call read it,
--          0 if it did not.
--          Position -1: the worker has no lease (it was taken for dead), so it gets
--          nothing until it registers again.
-- @include record
-- @include move
-- @include take
-- (At most 16 fields in all, as a common call has, fit the table cjson makes: the
-- payloads are added only where they are used.)
local o = cjson.decode(ARGV[1])
if (o.done or 0) > 0 then
  o.payload, o.data = ARGV[2], ARGV[3]
  o.again = ARGV[4] ~= '' and ARGV[4] or nil
  o.dead_entry = ARGV[5] ~= '' and ARGV[5] or nil
end
if (o.start or 0) > 0 then
  o.start_payload = ARGV[7]
end
local flow_keys = o.flow_keys or 0
local lanes = (#KEYS - 6 - flow_keys) / 4  -- from KEYS[7] (lib/queue.lua's queue_lane)
local base = keys_base(KEYS[3], 'counter')
local now, read = o.now, 0
if not now then
  read = queue_now()
  now = math.max(read, o.floor or 0)
end

-- The task this worker finished: out of its in-progress ZSET, its outcome recorded.
local recorded = false
if (o.done or 0) > 0 then
  local flow = flow_keys > 0 and flow_open(#KEYS - flow_keys + 1, ARGV[6])
  recorded = record_outcome(o, 7, KEYS[2], KEYS[4], KEYS[5], KEYS[6], base, flow, now)
end

-- A task held ahead starts: its score turns positive, if the worker still holds it (a
-- worker taken for dead runs it anyway; its outcome is fenced as any other's). When
-- the fenced outcome recorded above was still held, so is the task to start: recovery
-- takes a worker's tasks all at once, a worker starts the tasks it holds ahead in the
-- order it took them, and takes none otherwise while any is held, so every task whose
-- outcome it records then was taken before. The take then writes both scores in one ZADD.
local start = o.start or 0
local function start_held()
  if start > 0 then
    local _, _, taken = queue_lane(7, start)
    redis.call('ZADD', taken, 'XX', o.start_score, o.start_payload)
    start = 0
  end
end
local code = recorded and 1 or 0

-- A worker that has just recorded a task it held still has its lease: recovery takes
-- the lease and the worker's tasks together, atomically.
if o.take and not recorded and not redis.call('ZSCORE', KEYS[1], o.worker) then
  start_held()
  return {false, -1, 0, code, now, 0, read}
end

local wait, woken = -1, nil
if o.move then
  wait, woken = move_due(7, lanes, KEYS[3], now)
end
local payload, position, score, started = false, 0, 0, false
if o.take then
  payload, position, score, wait, started = take_next(o, 7, lanes, KEYS[2],
    o.metrics and KEYS[6], base, limits_settings(o.limits or ''), now, wait,
    recorded and o.id and start or 0)
end
if started then
  start = 0
end
if woken then
  take_wake(woken)
end
start_held()
return {payload, position, wait, code, now, score, read}
