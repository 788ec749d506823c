-- KEYS: 1) the ZSET of worker leases  2) the HASH of running tasks (task id -> its
--       attempts, see lib/attempts.lua)  3) the enqueue counter of the queues' home
--       4) the result hash of the finished task (ARGV 3), or any key of the task system
--       when there is none
--       5) the per-minute counts (HASH) of the finished task's queue for this hour
--       6) the HASH of running totals for metrics; then for each queue the worker
--       serves, in priority order: its ready ZSET (also the name of its wake-up
--       channel), its delayed ZSET, the worker's in-progress ZSET for it, its
--       dead-letter list
-- ARGV: 1) the worker's id
--       2) "take+move", "take", "move" or "": take a task; move due delayed tasks to
--       their queues
--       3) the position (1-based) of the queue of a finished task to record, 0 for none
--       4) its payload as taken  5) its id ("" when unknown: no result is written)
--       6) how it ended: "ok", "retry", "defer", "bury" or "cancel" (terminated)
--       7) "ok": the return value (JSON); "retry", "bury": the error (a JSON object)
--       8) "retry", "defer": the payload to run again  9) in how many ms
--       10) "bury": the dead-letter entry  11) the most entries a dead-letter list keeps
--       12) how long to keep a result after its last change, in ms
--       13) "" without metrics, else the finished task's queue then, after a space,
--       the upper bound of its duration's histogram bucket ("on" with no finished task)  14) its duration in µs
--       15) when the worker took it (the server's ms, as this script returned it): the
--       outcome is recorded only if that take is still the task's current attempt; ""
--       to record it whatever its attempt (a supervisor for its killed child)  16) 1 when it was the task's first attempt for
--       sure (its payload has the enqueue time, no retry and no crash): its result has
--       no earlier attempt to read
--       17) how many keys at the end of KEYS are the finished task's workflow section
--       (see lib/flow.lua), 0 when it is not a workflow's step  18) its step's argument
--       (lib/flow.lua's flow_open)
--       19) the position (1-based) of the queue of a task held ahead that starts now,
--       0 for none  20) its payload  21) its score as the take returned it
--       22) "ahead": the task taken is held ahead, not started: its score in the
--       in-progress ZSET is negated until a later call starts it, and
--       recovery counts no crash against it (see queue_recover.lua)
--       23) the server's time as the worker reckons it (epoch ms, from the server's
--       clock read by one of its earlier calls): "=<ms>" to take it as the time, so
--       that the script reads no clock; ">=<ms>" to read the clock, but never go
--       below it (the worker's times never step back); "" to read the clock
--       24) the limits set in the worker's settings, which replace those of the same
--       kind and key in the payloads it takes (see limits_settings in lib/limit_settings.lua)
--       25) the task ids of steps whose outcomes the worker carried from this home's
--       outbox (space-separated), their entries deleted when the finished task is a
--       step of this home's (whose section names that outbox: lib/flow.lua)
-- Returns: {payload, position of its queue, wait, recorded, now, score, read}: payload is false when
--          no task was taken; wait is the number of ms until the next delayed task is
--          due (0 when more are due now, -1 when none is or nothing was moved), or
--          when the take set tasks aside on their limits (lib/limits.lua), until the
--          first start one of them booked (0: call again at once);
--          recorded is 1 when the finished task was recorded, 0 when the worker no
--          longer held it (it was recovered meanwhile, and nothing changed); now is the
--          server's time (epoch ms), as ARGV 23 says; score is the taken task's score in
--          its queue; read is the server's clock as this call read it, 0 if it did not.
--          Position -1: the worker has no lease (it was taken for dead), so it gets
--          nothing until it registers again.
local BATCH = 100  -- at most this many delayed tasks move per queue and call
local REFUSALS = 50  -- at most this many tasks over their limits are set aside per call
-- @include flow
-- @include attempts
-- @include limits
-- @include limit_settings
local flow_keys = tonumber(ARGV[17])
local queues = (#KEYS - 6 - flow_keys) / 4
local base = limits_base(KEYS[3], 'counter')
local settings = limits_settings(ARGV[24])
local reckoned, read = tonumber(string.match(ARGV[23], '%d+$')), 0
local now = reckoned
if not (reckoned and string.sub(ARGV[23], 1, 1) == '=') then
  read = queue_now()
  now = math.max(read, reckoned or 0)
end

-- The task this worker finished: out of its in-progress ZSET, its outcome recorded.
local recorded = 0
local done = tonumber(ARGV[3])
if done > 0 then
  local ready, delayed = KEYS[4 * done + 3], KEYS[4 * done + 4]
  local running, dead = KEYS[4 * done + 5], KEYS[4 * done + 6]
  local id, outcome, result = ARGV[5], ARGV[6], KEYS[4]
  local flow = flow_keys > 0 and flow_open(#KEYS - flow_keys + 1, ARGV[18])
  if flow and flow.outbox and ARGV[25] ~= '' then
    for carried in string.gmatch(ARGV[25], '%x+') do
      redis.call('HDEL', flow.outbox, carried)
    end
  end
  -- A step of a cancelled workflow does not run again.
  if flow and (outcome == 'retry' or outcome == 'defer') and flow_cancelled(flow, result) then
    outcome = 'cancel'
  end
  -- The attempt this outcome is of: "<take ms> <worker id>", written when it was taken.
  -- An outcome given its take time is fenced: once the task was recovered and taken
  -- again (by any worker, this one included), its older execution records nothing.
  -- Without a take time (a supervisor for its killed child): any attempt of the worker.
  local held = id ~= '' and redis.call('HGET', KEYS[2], id)
  local mine = attempt_of(ARGV[15] ~= '' and (ARGV[15] .. ' ' .. ARGV[1]), ARGV[1])
  -- (A payload whose id the take could not read has no attempt: its ZREM fences it.)
  local current = not held or attempts_has(held, mine)
  local attempt = false
  if current and redis.call('ZREM', running, ARGV[4]) == 1 then
    recorded = 1
    if held then
      attempt = attempts_remove(KEYS[2], id, held, mine)
    end
    local limits = id ~= '' and limits_of(ARGV[4])
    if limits then  -- its permits go to the tasks waiting for them
      limits_release(base, limits, id)
    end
    local keep = tonumber(ARGV[12])
    if outcome == 'bury' then
      redis.call('RPUSH', dead, ARGV[10])
      redis.call('LTRIM', dead, -tonumber(ARGV[11]), -1)
    elseif outcome == 'retry' or outcome == 'defer' then
      local delay = tonumber(ARGV[9])
      redis.call('ZADD', delayed, now + delay, ARGV[8])
      if flow then
        flow_requeued(flow, flow.step, ARGV[8])
      end
      if redis.call('ZRANGE', delayed, 0, 0)[1] == ARGV[8] then
        redis.call('PUBLISH', ready, 'delayed')
      end
      keep = keep + delay
    end
    -- Throughput per minute, kept a day (the key is the hour's, given by the worker).
    local kind = ({ok = 'processed', bury = 'failed', retry = 'retried'})[outcome]
    if kind then
      -- A new field (the first count of a minute) may be the hour's first: only then
      -- can the key be new, and need its expiry.
      if redis.call('HINCRBY', KEYS[5], math.floor(now / 60000) .. ':' .. kind, 1) == 1 then
        redis.call('PEXPIRE', KEYS[5], 90000000)
      end
      if ARGV[13] ~= '' then
        -- One count per queue, outcome and duration bucket, and the total µs per queue:
        -- the outcomes' totals and the histogram are sums of these (see metrics.py).
        local queue, bound = string.match(ARGV[13], '^(.*) ([^ ]+)$')
        redis.call('HINCRBY', KEYS[6], queue .. ':' .. kind .. ':' .. bound, 1)
        redis.call('HINCRBY', KEYS[6], queue .. ':us', ARGV[14])
      end
    end
    if id ~= '' then
      -- One read and one write of the result hash, whatever the outcome; no read after
      -- a first attempt, whose result holds no attempt yet. Its expiry goes first: it
      -- says whether the result still exists (if not, its message is written again).
      local first = ARGV[16] == '1'
      local kept = redis.call('PEXPIRE', result, keep) == 1
      local known = first and {false, false, kept}
        or redis.call('HMGET', result, 'workers', 'started_at', 'message')
      local fields = {}
      local function set(name, value)
        fields[#fields + 1] = name
        fields[#fields + 1] = value
      end
      if attempt then  -- "<start ms> <worker id>", written when it was taken
        local started, worker = string.match(attempt, '^(%d+) (.*)$')
        set('last_attempted_at', started)
        set('workers', known[1] and (known[1] .. ' ' .. worker) or worker)
        if not known[2] then
          set('started_at', started)
        end
      end
      if outcome == 'retry' or outcome == 'bury' then
        local errors = not first and redis.call('HGET', result, 'errors')
        set('errors',
          errors and (string.sub(errors, 1, -2) .. ',' .. ARGV[7] .. ']') or ('[' .. ARGV[7] .. ']'))
      end
      if outcome == 'ok' then
        set('status', 'SUCCESSFUL')
        set('finished_at', now)
        set('return_value', ARGV[7])
      elseif outcome == 'bury' then
        set('status', 'FAILED')
        set('finished_at', now)
      elseif outcome == 'cancel' then
        set('status', 'CANCELLED')
        set('finished_at', now)
      else  -- waits to run again: cancelling it needs its new payload
        set('status', 'READY')
        set('payload', ARGV[8])
      end
      if not known[3] then  -- its result expired while it waited
        set('message', ARGV[4])
      end
      redis.call('HSET', result, unpack(fields))
      if not kept then
        redis.call('PEXPIRE', result, keep)
      end
    end
    -- A final outcome releases the steps after it in the same script (or is written to
    -- the outbox, for its workflow's home to settle: lib/flow.lua).
    if flow and outcome == 'ok' then
      flow_outcome(flow, 'S', ARGV[7], now, tonumber(ARGV[12]))
    elseif flow and (outcome == 'bury' or outcome == 'cancel') then
      local status = outcome == 'bury' and 'FAILED' or 'CANCELLED'
      local record = flow_failure(flow, status, outcome == 'bury' and ARGV[7])
      flow_outcome(flow, string.sub(status, 1, 1), record, now, tonumber(ARGV[12]))
    end
  end
end

-- A task held ahead starts: its score turns positive, if the worker still holds it (a
-- worker taken for dead runs it anyway; its outcome is fenced as any other's). When
-- the fenced outcome recorded above was still held, so is the task to start: recovery
-- takes a worker's tasks all at once, and a worker takes no task while one is held
-- ahead, so every task whose outcome it records then was taken before. The take below
-- then writes both scores in one ZADD.
local start = tonumber(ARGV[19])
local surely_held = recorded == 1 and ARGV[5] ~= ''
local function start_held()
  if start > 0 then
    redis.call('ZADD', KEYS[4 * start + 5], 'XX', ARGV[21], ARGV[20])
    start = 0
  end
end

-- A worker that has just recorded a task it held still has its lease: recovery takes
-- the lease and the worker's tasks together, atomically.
local take = string.sub(ARGV[2], 1, 4) == 'take'
if take and recorded == 0 and not redis.call('ZSCORE', KEYS[1], ARGV[1]) then
  start_held()
  return {false, -1, 0, recorded, now, 0, read}
end

-- Due delayed tasks to their ready ZSETs, ranked by the priority at the start of their
-- payload as enqueue ranks them (see lib/queue.lua), in the order they fell due.
local wait = -1
local woken = {}
if string.sub(ARGV[2], -4) == 'move' then
  for i = 1, queues do
    local ready, delayed = KEYS[4 * i + 3], KEYS[4 * i + 4]
    local first = redis.call('ZRANGE', delayed, 0, 0, 'WITHSCORES')
    if first[2] and tonumber(first[2]) <= now then
      local due = redis.call('ZRANGEBYSCORE', delayed, '-inf', now, 'LIMIT', 0, BATCH)
      redis.call('ZREM', delayed, unpack(due))
      if redis.call('ZCARD', ready) == 0 then
        woken[#woken + 1] = ready
      end
      local counter = redis.call('INCRBY', KEYS[3], #due) - #due
      for j, payload in ipairs(due) do
        redis.call('ZADD', ready, queue_rank(payload) + counter + j, payload)
      end
      first = redis.call('ZRANGE', delayed, 0, 0, 'WITHSCORES')
    end
    if first[2] then
      local until_due = math.max(0, tonumber(first[2]) - now)
      if wait < 0 or until_due < wait then
        wait = until_due
      end
    end
  end
end

-- The first task of the first non-empty queue that its limits let start, into this
-- worker's in-progress ZSET with its ready score, so that recovery puts it back where
-- it was. A task over a limit is set aside (lib/limits.lua) and the next one is tried:
-- after REFUSALS of them, the worker is told to call again at once (wait 0).
local payload, position, score = false, 0, 0
local refused = 0
if take then
  for i = 1, queues do
    local ready = KEYS[4 * i + 3]
    local popped = redis.call('ZPOPMIN', ready)
    while popped[1] and refused < REFUSALS do
      local limits, id = limits_of(popped[1]), queue_id(popped[1])
      if not (limits and id) then
        break
      end
      if settings then
        limits_set(limits, settings)
      end
      local queue = string.sub(ready, #base + 7)  -- after 'ready:'
      local taken, at, kind = limits_take(base, limits, id, queue, popped[2], popped[1], now)
      if taken then
        break
      end
      if ARGV[13] ~= '' then  -- metrics.py's count of the tasks set aside
        redis.call('HINCRBY', KEYS[6], queue .. ':limited:' .. kind, 1)
      end
      refused = refused + 1
      if at and (wait < 0 or at - now < wait) then
        wait = at - now
      end
      popped = refused < REFUSALS and redis.call('ZPOPMIN', ready) or {}
    end
    if refused >= REFUSALS then
      wait = 0
      break
    end
    if popped[1] then
      payload, position, score = popped[1], i, popped[2]
      local held = ARGV[22] == 'ahead' and -tonumber(score) or score
      if start == i and surely_held then
        redis.call('ZADD', KEYS[4 * i + 5], ARGV[21], ARGV[20], held, payload)
        start = 0
      else
        redis.call('ZADD', KEYS[4 * i + 5], held, payload)
      end
      local id = queue_id(payload)
      if id then
        attempts_add(KEYS[2], id, now .. ' ' .. ARGV[1])
      end
      break
    end
  end
end
-- Tasks this call made ready in an empty queue, and did not take itself, wake the
-- other idle workers of that queue (as an enqueued task would).
for _, ready in ipairs(woken) do
  if redis.call('ZCARD', ready) > 0 then
    redis.call('PUBLISH', ready, 'ready')
  end
end
start_held()
return {payload, position, wait, recorded, now, score, read}
