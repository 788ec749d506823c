-- KEYS: 1) the queue's ready ZSET (also the name of its wake-up channel)
--       2) the queue's delayed ZSET  3) the enqueue counter of the queue's home
--       4) the task's result hash  5) the key that makes it unique (any key of the task
--       system when it is not)
-- ARGV: 1) the task payload, ending in '"retries":0}' (see messages.py): the script
--          stamps its enqueue time (see lib/queue.lua)
--       2) its rank (store.rank: its score in the ready ZSET before the counter is added)
--       3) when it is due: "" now, "+<ms>" after ms by the server's clock, "@<ms>" at epoch ms
--       4) the queue's most waiting tasks (ready, delayed, and waiting for a permit of a
--       concurrency limit: see lib/limits.lua), 0 for unbounded
--       5) how long to keep the result after its last change, in ms
--       6) its id  7) for how many ms an equal task is not enqueued again, 0 for no limit
--       8) its queue's name, to count it in the metrics' tasks added ("": not counted)
-- Returns: {1, the server's time (epoch ms) of the enqueue}; {0} when the queue is full;
--          {2, the id of the equal task enqueued in the last ARGV 7 ms} (in both last
--          cases nothing changed)
-- @include keys
-- @include queue
local limit, unique = tonumber(ARGV[4]), tonumber(ARGV[7])
if unique > 0 then
  local first = redis.call('GET', KEYS[5])
  if first then
    return {2, first}
  end
end
if limit > 0 then
  local base = keys_base(KEYS[3], 'counter')
  local queue = keys_queue_of(base, KEYS[1])
  local on_limits = redis.call('HGET', keys_name(base, 'limits_waiting'), queue)
  if redis.call('ZCARD', KEYS[1]) + redis.call('ZCARD', KEYS[2]) + (tonumber(on_limits) or 0)
      >= limit then
    return {0}
  end
end
if unique > 0 then
  redis.call('SET', KEYS[5], ARGV[6], 'PX', unique)
end
local now = queue_now()
local when, due = ARGV[3], now
if when ~= '' then
  due = tonumber(string.sub(when, 2))
  if string.sub(when, 1, 1) == '+' then
    due = now + due
  end
end
local payload = queue_stamp(ARGV[1], now, due)
if when == '' then
  queue_ready(KEYS[1], KEYS[3], tonumber(ARGV[2]), payload)
else
  redis.call('ZADD', KEYS[2], due, payload)
  -- A new earliest due time shortens the sleep of idle workers: wake them to re-read it.
  if redis.call('ZRANGE', KEYS[2], 0, 0)[1] == payload then
    redis.call('PUBLISH', KEYS[1], 'delayed')
  end
end
local more = {}
if unique > 0 then
  -- Named in the result so that cancelling the task frees its key (queue_cancel.lua).
  result_set(more, 'unique', KEYS[5])
end
if due > now then
  result_set(more, 'run_after', due)
end
queue_result(KEYS[4], payload, now, math.max(due - now, 0) + tonumber(ARGV[5]), more)
if ARGV[8] ~= '' then
  redis.call('HINCRBY', keys_name(keys_base(KEYS[3], 'counter'), 'totals'), ARGV[8] .. ':added', 1)
end
return {1, now}
