-- The outcome of a task a worker finished, recorded as queue_fetch.lua's first part.
-- @include flow
-- @include attempts
-- @include limits
-- @include result

-- Records the outcome ``o`` (queue_fetch.lua's options: the finished task's fields,
-- its lane "done" among the lanes from KEYS[first], lib/queue.lua's queue_lane) of the
-- task the worker ``o.worker`` finished, at ``now``. ``running``: the HASH of running
-- tasks; ``result``: the task's result hash; ``stats``: its queue's per-minute counts
-- for this hour; ``totals``: the running totals for metrics; ``base``: the queues'
-- home (lib/keys.lua's keys_base); ``flow``: the task's workflow section
-- (lib/flow.lua), false for none.
-- Returns true when it was recorded, false when the worker no longer held it (it was
-- recovered meanwhile, and nothing changed).
local function record_outcome(o, first, running, result, stats, totals, base, flow, now)
  local ready, delayed, taken, dead = queue_lane(first, o.done)
  local id, outcome = o.id or '', o.outcome
  if flow and flow.outbox and o.carried then
    redis.call('HDEL', flow.outbox, unpack(o.carried))
  end
  -- A step of a cancelled workflow does not run again.
  if flow and (outcome == 'retry' or outcome == 'defer') and flow_cancelled(flow, result) then
    outcome = 'cancel'
  end
  -- The attempt this outcome is of: "<take ms> <worker id>", written when it was taken.
  -- Every outcome is fenced: once the task was recovered and taken again (by any
  -- worker, this one included), its older execution records nothing.
  if not o.attempt then
    error('an outcome needs "attempt", the time of the take it is of')
  end
  local held = id ~= '' and redis.call('HGET', running, id)
  local mine = attempt_of(o.attempt .. ' ' .. o.worker, o.worker)
  -- (A payload whose id the take could not read has no attempt: its ZREM fences it.)
  if held and not attempts_has(held, mine) or redis.call('ZREM', taken, o.payload) == 0 then
    return false
  end
  local attempt = held and attempts_remove(running, id, held, mine)
  local limits = id ~= '' and limits_of(o.payload)
  if limits then  -- its permits go to the tasks waiting for them
    limits_release(base, limits, id)
  end
  local keep = o.keep
  if outcome == 'bury' then
    redis.call('RPUSH', dead, o.dead_entry)
    redis.call('LTRIM', dead, -o.dead_max, -1)
  elseif outcome == 'retry' or outcome == 'defer' then
    local delay = o.delay_ms or 0
    redis.call('ZADD', delayed, now + delay, o.again)
    if flow then
      flow_requeued(flow, flow.step, o.again)
    end
    if redis.call('ZRANGE', delayed, 0, 0)[1] == o.again then
      redis.call('PUBLISH', ready, 'delayed')
    end
    keep = keep + delay
  end
  -- Throughput per minute, kept a day (the key is the hour's, given by the worker).
  local kind = ({ok = 'processed', bury = 'failed', retry = 'retried'})[outcome]
  if kind then
    -- A new field (the first count of a minute) may be the hour's first: only then
    -- can the key be new, and need its expiry.
    if redis.call('HINCRBY', stats, math.floor(now / 60000) .. ':' .. kind, 1) == 1 then
      redis.call('PEXPIRE', stats, 90000000)
    end
    if o.bucket then
      -- One count per queue, outcome and duration bucket, and the total µs per queue:
      -- the outcomes' totals and the histogram are sums of these (see metrics.py).
      redis.call('HINCRBY', totals, o.queue .. ':' .. kind .. ':' .. o.bucket, 1)
      redis.call('HINCRBY', totals, o.queue .. ':us', o.micros or 0)
    end
  end
  if o.wait then  -- a first attempt's wait in its queue: its bucket, and the total ms
    local bucket, ms = string.match(o.wait, '^(%S+) (%d+)$')
    redis.call('HINCRBY', totals, o.queue .. ':wait:' .. bucket, 1)
    redis.call('HINCRBY', totals, o.queue .. ':wait_ms', ms)
  end
  if id ~= '' then
    -- One read and one write of the result hash, whatever the outcome; no read after
    -- a first attempt, whose result holds no attempt yet. Its expiry goes first: it
    -- says whether the result still exists (if not, its message is written again).
    local kept = redis.call('PEXPIRE', result, keep) == 1
    local known = o.first and {false, false, false}
      or redis.call('HMGET', result, 'workers', 'started_at', 'errors')
    local fields = {}
    if attempt then  -- "<start ms> <worker id>", written when it was taken
      result_attempt(fields, attempt, known[1], known[2])
    end
    if outcome == 'retry' or outcome == 'bury' then
      result_error(fields, known[3], o.data)
    end
    if outcome == 'ok' then
      result_ended(fields, 'SUCCESSFUL', now)
      result_set(fields, 'return_value', o.data)
    elseif outcome == 'bury' then
      result_ended(fields, 'FAILED', now)
    elseif outcome == 'cancel' then
      result_ended(fields, 'CANCELLED', now)
    else  -- waits to run again: cancelling it needs its new payload
      result_set(fields, 'status', 'READY')
      result_set(fields, 'payload', o.again)
    end
    if o.metadata then  -- the run changed it: saved with its outcome, as fenced
      result_set(fields, 'metadata', o.metadata)
    end
    if o.progress then  -- said since its last save: saved with its outcome too
      result_progress(fields, o.progress, now)
    end
    if not kept then  -- its result expired while it waited
      result_set(fields, 'message', o.payload)
    end
    result_write(result, fields, not kept and keep)
  end
  -- A final outcome releases the steps after it in the same script (or is written to
  -- the outbox, for its workflow's home to settle: lib/flow.lua).
  if flow and outcome == 'ok' then
    flow_outcome(flow, 'S', o.data, now, o.keep)
  elseif flow and (outcome == 'bury' or outcome == 'cancel') then
    local status = outcome == 'bury' and 'FAILED' or 'CANCELLED'
    local record = flow_failure(flow, status, outcome == 'bury' and o.data)
    flow_outcome(flow, string.sub(status, 1, 1), record, now, o.keep)
  end
  return true
end
