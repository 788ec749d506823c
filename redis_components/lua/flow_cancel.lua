-- KEYS: 1) the workflow's HASH  2) the task system's enqueue counter  3) the ZSET of live
--       workflows  4) the ZSET of finished ones  5) the HASH of running tasks; then for
--       each step, in order: its result hash, its queue's ready ZSET, its delayed ZSET,
--       its termination request key
-- ARGV: 1) "terminate": running steps are asked to stop; "" lets them finish
--       2) how long to keep a result after its last change, in ms  3) how long a
--       termination request waits for the worker to act on it, in ms
-- Returns: {cancelled, status, dropped, running}: cancelled is 1 when this call
--          cancelled the workflow, 0 when it had finished or was cancelled already
--          (nothing changed); status is its status as it was (false when no such
--          workflow is kept); dropped: the steps that will not run (waiting, or taken
--          out of their queue); running: the steps still running (asked to stop with
--          "terminate")
-- Atomic against a worker taking a step: each queued step is either taken (and then
-- running) or removed. No step starts after this script; a running one may still end,
-- and its outcome then releases nothing.
-- @include flow
local status = redis.call('HGET', KEYS[1], 'status')
if not status or status == 'CANCELLED' or redis.call('HGET', KEYS[1], 'finished_at') then
  return {0, status, 0, 0}
end
local time = redis.call('TIME')
local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
local keep = tonumber(ARGV[2])
local dropped, running = 0, 0
for n = 1, (#KEYS - 5) / 4 do
  local result, ready, delayed, terminate = KEYS[4 * n + 2], KEYS[4 * n + 3], KEYS[4 * n + 4],
    KEYS[4 * n + 5]
  local st = redis.call('HGET', KEYS[1], 'st:' .. n)
  local gone = st == 'W'
  if st == 'Q' then
    local id = redis.call('HGET', KEYS[1], 'id:' .. n)
    local known = redis.call('HMGET', result, 'payload', 'message')
    known[3] = redis.call('HGET', KEYS[1], 'pay:' .. n)
    local removed = 0
    for i = 1, 3 do
      if known[i] then
        removed = removed + redis.call('ZREM', ready, known[i]) + redis.call('ZREM', delayed, known[i])
      end
    end
    if removed == 0 and redis.call('HEXISTS', KEYS[5], id) == 1 then
      running = running + 1
      if ARGV[1] == 'terminate' then
        redis.call('SET', terminate, '1', 'PX', tonumber(ARGV[3]))
      end
    else  -- taken out of its queue
      gone = true
      redis.call('HSET', result, 'status', 'CANCELLED', 'finished_at', now)
      redis.call('PEXPIRE', result, keep)
    end
  end
  if gone then
    dropped = dropped + 1
    redis.call('HSET', KEYS[1], 'st:' .. n, 'C', 'r:' .. n,
      '{"step":' .. cjson.encode(redis.call('HGET', KEYS[1], 'id:' .. n)) .. ',"status":"CANCELLED"}')
  end
end
redis.call('HSET', KEYS[1], 'status', 'CANCELLED', 'cancelled_at', now)
if redis.call('HINCRBY', KEYS[1], 'left', -dropped) == 0 then
  flow_finish(flow_open(1), now, keep)
end
return {1, status, dropped, running}
