-- KEYS: 1) the task's queue's ready ZSET  2) its delayed ZSET  3) the task's result hash
--       4) the HASH of running tasks  5) the task's termination request key
--       6) the key that made it unique: freed if it still names this task, so that a
--          cancelled task does not stop an equal one from being enqueued (any key of the
--          task system when it is not unique); then, for a workflow's step, its workflow
--          section (lib/flow.lua)
-- ARGV: 1) the task's id  2) its payload as it waits (see the result's "payload")
--       3) "terminate": a running task is to be stopped; "" refuses
--       4) how long to keep the result after its last change, in ms
--       5) how long a termination request waits for the worker to act on it, in ms
--       6) the unique key's kind: "unique", or "" when KEYS 6 is not one  7) its step's
--       argument (lib/flow.lua's flow_open; 0: it is no workflow's step)  8) its queue's
--       name  9) "workflow": its workflow (in another home) was cancelled, so that,
--       running, it does not run again (see flow_cancelled)
-- Returns: 1 when the waiting task was removed (its result is CANCELLED),
--          2 when it is running and its worker was asked to terminate it,
--          0 when it is running and ARGV 3 is "" (nothing changed),
--          -1 when it is neither waiting nor running (finished, or never seen),
--          -2 when it was cancelled already
-- Removal is atomic against a worker taking the task: it is either taken or cancelled.
-- A cancelled step fails the steps after it in its workflow (as a failure would).
-- @include keys
-- @include flow
-- @include limits
local function free_unique()
  if ARGV[6] == 'unique' and redis.call('GET', KEYS[6]) == ARGV[1] then
    redis.call('DEL', KEYS[6])
  end
end
if ARGV[9] == 'workflow' then
  result_write(KEYS[3], {'workflow', 'CANCELLED'}, tonumber(ARGV[4]))
end
local limits = limits_of(ARGV[2])
local base = limits and keys_base(KEYS[1], 'ready:' .. ARGV[8])
local removed = redis.call('ZREM', KEYS[1], ARGV[2]) + redis.call('ZREM', KEYS[2], ARGV[2])
if limits and removed == 0 then  -- it may wait for a permit
  removed = limits_unwait(base, limits, ARGV[8], ARGV[2])
end
if removed > 0 then
  if limits then
    limits_cancel(base, limits, ARGV[1], ARGV[8], ARGV[2], true)
  end
  free_unique()
  local now = queue_now()
  result_write(KEYS[3], result_ended({}, 'CANCELLED', now), tonumber(ARGV[4]))
  if ARGV[7] ~= '0' then
    local flow = flow_open(7, ARGV[7])
    flow_outcome(flow, 'C', flow_failure(flow, 'CANCELLED'), now, tonumber(ARGV[4]))
  end
  return 1
end
if redis.call('HEXISTS', KEYS[4], ARGV[1]) == 1 then
  if ARGV[3] ~= 'terminate' then
    return 0
  end
  redis.call('SET', KEYS[5], '1', 'PX', tonumber(ARGV[5]))
  free_unique()
  return 2
end
if redis.call('HGET', KEYS[3], 'status') == 'CANCELLED' then
  return -2
end
if ARGV[9] == 'workflow' and ARGV[7] ~= '0' then
  -- Neither waiting nor running: it ended (its outcome stays, whether it was carried
  -- or not), or it is gone (purged): then it ends as cancelled, for its workflow to end.
  flow_gone(flow_open(7, ARGV[7]))
end
return -1
