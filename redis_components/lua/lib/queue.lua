-- Making a task ready (see tasks/store/): included by every script that creates or
-- re-queues a task, so that a task is written into its queue one way. A payload starts
-- '{"id":"<hex>","priority":<int>,' and a first attempt's ends '"retries":0}' (the
-- grammar is tasks/messages.py's); a task's score in its queue's ready ZSET is its rank,
-- (100 - priority) * 2^44 + 2^43 (store.rank), plus the value of the task system's enqueue
-- counter, so that higher priorities come first and equal ones in the order enqueued.

-- @include result

local QUEUE_BAND, QUEUE_FIRST = 17592186044416, 8796093022208  -- store.BAND, store.FIRST

-- A worker's lanes in a script's KEYS (queue_fetch.lua's): from ``first``, four keys per
-- lane, its queue's ready ZSET, its delayed ZSET, the worker's in-progress ZSET for it
-- and its dead-letter list. The keys of lane ``i``. (Key names, not a table per lane:
-- each table a script makes costs the server about a microsecond.)
local function queue_lane(first, i)
  local at = first + 4 * (i - 1)
  return KEYS[at], KEYS[at + 1], KEYS[at + 2], KEYS[at + 3]
end

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
-- reading its result hash ('"enqueued_at":<ms>,' before '"retries":0}'), and when it is
-- due if that is later (then '"due_at":<ms>,' after it); any other payload as it is.
local function queue_stamp(payload, now, due)
  local head = string.match(payload, '^(.*),"retries":0}$')
  if not head then
    return payload
  end
  local later = due and due > now and (',"due_at":' .. due) or ''
  return head .. ',"enqueued_at":' .. now .. later .. ',"retries":0}'
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

-- A new task's result hash: READY with its payload (and the fields of ``more``, a flat
-- list of names and values, if any), kept "keep" ms.
local function queue_result(result, payload, now, keep, more)
  local fields = {'status', 'READY', 'message', payload, 'enqueued_at', now}
  for _, value in ipairs(more or {}) do
    fields[#fields + 1] = value
  end
  result_write(result, fields, keep)
end
