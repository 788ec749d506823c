-- Adding a new task to its queue (see tasks/store/queues.py): the one way both
-- queue_enqueue.lua (one task) and queue_enqueue_many.lua (many) write it.
-- @include keys
-- @include queue

-- Whether adding ``adding`` tasks to the queue of ``ready`` (and ``delayed``), in the
-- home of the enqueue counter ``counter``, would pass its most waiting tasks ``limit``
-- (ready, delayed, and waiting for a permit of a concurrency limit: see lib/limits.lua).
local function enqueue_full(counter, ready, delayed, limit, adding)
  local base = keys_base(counter, 'counter')
  local queue = keys_queue_of(base, ready)
  local on_limits = redis.call('HGET', keys_name(base, 'limits_waiting'), queue)
  return redis.call('ZCARD', ready) + redis.call('ZCARD', delayed) + (tonumber(on_limits) or 0)
    + adding > limit
end

-- Add the task ``payload`` (ending in '"retries":0}': see messages.py) of id ``id`` and
-- rank ``rank`` (store.rank) to the queue of ``ready`` and ``delayed`` in the home of
-- ``counter``, due ``when`` ("" now, "+<ms>" after ms by the server's clock, "@<ms>" at
-- epoch ms), its result in ``result``, kept ``keep`` ms after its last change, at the
-- server's time ``now``. ``unique_ms`` > 0: not if an equal task was added in the last
-- ``unique_ms`` (the key ``unique`` holds its id). ``limit`` > 0: not if the queue holds
-- that many (see enqueue_full). ``counted``: its queue, to count it in the metrics'
-- tasks added ("": not counted).
-- Returns {1, now}; {0} when the queue is full; {2, the equal task's id} (in both last
-- cases nothing changed).
local function enqueue_task(ready, delayed, counter, result, unique, payload, rank, when,
    limit, keep, id, unique_ms, counted, now)
  if unique_ms > 0 then
    local first = redis.call('GET', unique)
    if first then
      return {2, first}
    end
  end
  if limit > 0 and enqueue_full(counter, ready, delayed, limit, 1) then
    return {0}
  end
  if unique_ms > 0 then
    redis.call('SET', unique, id, 'PX', unique_ms)
  end
  local due = now
  if when ~= '' then
    due = tonumber(string.sub(when, 2))
    if string.sub(when, 1, 1) == '+' then
      due = now + due
    end
  end
  payload = queue_stamp(payload, now, due)
  if when == '' then
    queue_ready(ready, counter, rank, payload)
  else
    redis.call('ZADD', delayed, due, payload)
    -- A new earliest due time shortens the sleep of idle workers: wake them to re-read it.
    if redis.call('ZRANGE', delayed, 0, 0)[1] == payload then
      redis.call('PUBLISH', ready, 'delayed')
    end
  end
  local more = {}
  if unique_ms > 0 then
    -- Named in the result so that cancelling the task frees its key (queue_cancel.lua).
    result_set(more, 'unique', unique)
  end
  if due > now then
    result_set(more, 'run_after', due)
  end
  queue_result(result, payload, now, math.max(due - now, 0) + keep, more)
  if counted ~= '' then
    local totals = keys_name(keys_base(counter, 'counter'), 'totals')
    redis.call('HINCRBY', totals, counted .. ':added', 1)
  end
  return {1, now}
end
