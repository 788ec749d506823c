-- Making a task ready (see tasks/store/): included by every script that creates or
-- re-queues a task, so that a task is written into its queue one way. A payload starts
-- '{"id":"<hex>","priority":<int>,' and a first attempt's ends '"retries":0}' (the
-- grammar is tasks/messages.py's); a task's score in its queue's ready ZSET is its rank,
-- (100 - priority) * 2^44 + 2^43 (store.rank), plus the value of the task system's enqueue
-- counter, so that higher priorities come first and equal ones in the order enqueued.

local QUEUE_BAND, QUEUE_FIRST = 17592186044416, 8796093022208  -- store.BAND, store.FIRST

-- The server's time, epoch ms.
local function queue_now()
  local time = redis.call('TIME')
  return tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
end

-- The task id at the start of a payload (nil if it is not one).
local function queue_id(payload)
  return string.match(payload, '^{"id":"(%x+)"')
end

-- The rank of a payload by the priority it starts with (0 if it names none in -100..100).
local function queue_rank(payload)
  local priority = tonumber(string.match(payload, '^{"id":"[^"]*","priority":(%-?%d+),'))
  if not priority or priority < -100 or priority > 100 then
    priority = 0
  end
  return (100 - priority) * QUEUE_BAND + QUEUE_FIRST
end

-- A first attempt's payload with its enqueue time, what a worker needs to run it without
-- reading its result hash ('"enqueued_at":<ms>,' before '"retries":0}'); any other
-- payload as it is.
local function queue_stamp(payload, now)
  local head = string.match(payload, '^(.*),"retries":0}$')
  return head and (head .. ',"enqueued_at":' .. now .. ',"retries":0}') or payload
end

-- A payload's crash count ('"crashes":<n>' at its end, 0 without), and the payload
-- without it, to which queue_crashed adds a new count; nil if it is not a task's payload.
local function queue_crashes(payload)
  local body, count = string.match(payload, '^(.*),"crashes":(%d+)}$')
  if body then
    return body, tonumber(count)
  end
  if string.sub(payload, -1) == '}' then
    return string.sub(payload, 1, -2), 0
  end
  return nil, 0
end

local function queue_crashed(body, crashes)
  return body .. ',"crashes":' .. crashes .. '}'
end

-- Put a payload in its queue's ready ZSET at rank + the next count of the enqueue
-- counter. Only the first task of an empty queue wakes idle workers (on the channel named
-- as the ZSET): a worker that saw the queue empty is woken by that task, and takes tasks
-- until the queue is empty again.
local function queue_ready(ready, counter, rank, payload)
  redis.call('ZADD', ready, rank + redis.call('INCR', counter), payload)
  if redis.call('ZCARD', ready) == 1 then
    redis.call('PUBLISH', ready, 'ready')
  end
end

-- A new task's result hash: READY with its payload, kept "keep" ms.
local function queue_result(result, payload, now, keep)
  redis.call('HSET', result, 'status', 'READY', 'message', payload, 'enqueued_at', now)
  redis.call('PEXPIRE', result, keep)
end
