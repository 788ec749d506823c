-- KEYS: 1) the HASH of running tasks (task id -> its attempts, see lib/attempts.lua)
--       2) the task's result hash (lib/result.lua)
-- ARGV: 1) the task's id  2) the attempt that saves it, "<take ms> <worker id>" (as
--       queue_fetch.lua's "attempt" and "worker" make it)  3) its metadata (a JSON
--       object), "" to leave it  4) its progress (a JSON object without "at", see
--       lib/result.lua's result_progress), "" to leave it  5) the attempt's trace
--       context (a W3C traceparent), "" to leave it
-- Returns: 1 when saved; 0 when that attempt no longer runs (its task was recovered and
--          taken again, or has ended) or its result expired: nothing changes
-- A running task saves its metadata (context.save_metadata()) or its progress
-- (context.set_progress()), or tracing keeps its attempt's context: fenced as an outcome
-- is, so that a run given up for dead cannot overwrite what the next run saves.
-- @include attempts
-- @include result
local held = redis.call('HGET', KEYS[1], ARGV[1])
if not attempts_has(held, attempt_of(ARGV[2], '')) or redis.call('EXISTS', KEYS[2]) == 0 then
  return 0
end
local fields = {}
if ARGV[3] ~= '' then
  result_set(fields, 'metadata', ARGV[3])
end
if ARGV[4] ~= '' then
  local time = redis.call('TIME')
  result_progress(fields, ARGV[4], time[1] * 1000 + math.floor(time[2] / 1000))
end
if ARGV[5] ~= '' then
  result_set(fields, 'trace', ARGV[5])
end
result_write(KEYS[2], fields, false)
return 1
