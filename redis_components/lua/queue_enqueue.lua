-- KEYS: 1) the queue's ready ZSET (also the name of its wake-up channel)
--       2) the queue's delayed ZSET  3) the task system's enqueue counter
--       4) the task's result hash  5) the key that makes it unique (any key of the task
--       system when it is not)
-- ARGV: 1) the task payload, ending in '"retries":0}' (see messages.py): the script adds
--          '"enqueued_at":<its time, epoch ms>,' before it, what a worker needs to run
--          a first attempt without reading the result hash
--       2) its rank, (100 - priority) * 2^44 + 2^43: its score in the ready ZSET before
--          the counter is added, so higher priorities come first and equal ones in order
--       3) when it is due: "" now, "+<ms>" after ms by the server's clock, "@<ms>" at epoch ms
--       4) the queue's most waiting (ready + delayed) tasks, 0 for unbounded
--       5) how long to keep the result after its last change, in ms
--       6) its id  7) for how many ms an equal task is not enqueued again, 0 for no limit
-- Returns: {1, the server's time (epoch ms) of the enqueue}; {0} when the queue is full;
--          {2, the id of the equal task enqueued in the last ARGV 7 ms} (in both last
--          cases nothing changed)
local limit, unique = tonumber(ARGV[4]), tonumber(ARGV[7])
if unique > 0 then
  local first = redis.call('GET', KEYS[5])
  if first then
    return {2, first}
  end
end
if limit > 0 and redis.call('ZCARD', KEYS[1]) + redis.call('ZCARD', KEYS[2]) >= limit then
  return {0}
end
if unique > 0 then
  redis.call('SET', KEYS[5], ARGV[6], 'PX', unique)
end
local time = redis.call('TIME')
local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
local when, due = ARGV[3], now
local head = string.match(ARGV[1], '^(.*),"retries":0}$')
local payload = head and (head .. ',"enqueued_at":' .. now .. ',"retries":0}') or ARGV[1]
if when == '' then
  redis.call('ZADD', KEYS[1], tonumber(ARGV[2]) + redis.call('INCR', KEYS[3]), payload)
  -- Only the first task of an empty queue wakes idle workers: a worker that saw the
  -- queue empty is woken by that task, and takes tasks until the queue is empty again.
  if redis.call('ZCARD', KEYS[1]) == 1 then
    redis.call('PUBLISH', KEYS[1], 'ready')
  end
else
  due = tonumber(string.sub(when, 2))
  if string.sub(when, 1, 1) == '+' then
    due = now + due
  end
  redis.call('ZADD', KEYS[2], due, payload)
  -- A new earliest due time shortens the sleep of idle workers: wake them to re-read it.
  if redis.call('ZRANGE', KEYS[2], 0, 0)[1] == payload then
    redis.call('PUBLISH', KEYS[1], 'delayed')
  end
end
redis.call('HSET', KEYS[4], 'status', 'READY', 'message', payload, 'enqueued_at', now)
if unique > 0 then
  -- Named in the result so that cancelling the task frees its key (queue_cancel.lua).
  redis.call('HSET', KEYS[4], 'unique', KEYS[5])
end
if due > now then
  redis.call('HSET', KEYS[4], 'run_after', due)
end
redis.call('PEXPIRE', KEYS[4], math.max(due - now, 0) + tonumber(ARGV[5]))
return {1, now}
