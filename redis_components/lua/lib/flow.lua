-- Workflows (see tasks/workflows.py): included by every script that records a final
-- outcome of a task, so that the steps after it are released, or marked not run, in the
-- script that records it. A workflow is one HASH (its "flow section" starts at KEYS[base]):
--   KEYS base) the workflow's HASH  base+1) the enqueue counter  base+2) the ZSET of live
--   workflows  base+3) the ZSET of finished ones; then for each child of the step (in
--   the order of its "kids:<n>" field): its result hash, its queue's ready ZSET
-- The fields of the HASH (tasks/workflow_records.py writes and reads them; a test checks
-- that this list names exactly its FIELDS):
--   status       RUNNING, SUCCESSFUL, FAILED or CANCELLED
--   id           the workflow's id
--   steps        how many steps it has
--   left         how many steps are not final
--   result       its result's template: JSON with "@<n>" for step n's result
--   created_at   when it was written (epoch ms)
--   finished_at  when every step had ended (epoch ms)
--   failed       the task id of the step whose failure failed it
--   kr, kq       result and ready key prefixes (read by earlier releases' workers only)
--   count:<s>    how many steps are in state s (a listing reads these, not the steps)
-- and for each step n (1 to "steps"; a barrier is numbered after them):
--   id:<n>       its task id (a barrier has none: it is no task)
--   name:<n>     its task's name
--   q:<n>        its queue
--   st:<n>       its state: W waiting for its parents, Q released, S succeeded,
--                F failed, C cancelled, N not run
--   deps:<n>     how many of its parents are not final
--   kids:<n>     the steps (or barrier) after it, "3,4"
--   af:<n>       "1": it runs after a failed parent, given that parent's failure record
--   head:<n>     its payload before its first argument, or its whole payload
--   tail:<n>     its payload after its first argument
--   in:<n>       its first argument's template ("@<step>" references)
--   rank:<n>     its ready score before the counter
--                (head, tail, in and rank are dropped once it is released, and a
--                barrier's in once its r is written)
--   pay:<n>      its payload as it waits in its queue: once released, then each time it
--                is put back (a cancel finds it by this); a step in another home has
--                it in that home's HASH of waiting payloads instead (see below)
--   r:<n>        its return value, or its failure record (JSON)
--   bf:<n>       a barrier's "a parent of it failed" (its children that do not allow it
--                were marked not run)
-- A barrier (see flow_barrier) has st, deps, kids, in, r and bf; it is in no count, nor
-- in "left".
--
-- A step lives in its workflow's home (on one server, and the steps written there by
-- 0.1.0), or in its queue's (on a cluster). There, the script that records its final outcome
-- cannot reach the workflow: it writes the outcome to its home's outbox (a HASH, task
-- id -> "<step> <workflow id> <task id> <state> <record>"), and flow_settle.lua settles
-- it in the workflow's home, where the steps it releases go to the workflows' outbox
-- (a HASH, task id -> "<queue>\n<rank>\n<payload>") until flow_release.lua enqueues
-- each in its queue's home. Both are idempotent: a step counts once (st:<n> is Q
-- until then), and a released step is enqueued once (unless its result hash exists).
-- Whoever writes an entry carries it; what a process left (it died, or lost Redis) is
-- carried by a worker's heartbeat (tasks/store/task_store.py, carry_left).
-- @include keys
-- @include queue

-- A step's workflow section at KEYS[base], given its step's argument: in the workflow's
-- home, the workflow's keys and the step's number; elsewhere, its home's outbox and
-- "<step> <workflow id> <task id>" (see above), then its home's HASH of the payloads
-- that steps wait as (task id -> payload; a cancel finds a step by it).
local function flow_open(base, step)
  local n, rest = string.match(step or '', '^(%d+) (.+)$')
  if n then
    return {outbox = KEYS[base], waiting = KEYS[base + 1], step = tonumber(n), entry = step,
      id = string.match(rest, ' (%x+)$')}
  end
  return {key = KEYS[base], counter = KEYS[base + 1], live = KEYS[base + 2],
    done = KEYS[base + 3], kids = base + 4, step = tonumber(step or '')}
end

local function flow_status(flow)
  return redis.call('HGET', flow.key, 'status')
end

-- Step n goes from state "from" to state "to", and the counts of steps per state with it.
local function flow_mark(flow, n, from, to)
  redis.call('HSET', flow.key, 'st:' .. n, to)
  redis.call('HINCRBY', flow.key, 'count:' .. from, -1)
  redis.call('HINCRBY', flow.key, 'count:' .. to, 1)
end

-- Released step n waits in its queue again as "payload" (to be retried, deferred, or put
-- back after its worker died): a cancel finds it by this payload, whatever its result
-- hash holds (the result may expire while the step waits).
local function flow_requeued(flow, n, payload)
  if flow.waiting then
    redis.call('HSET', flow.waiting, flow.id, payload)
  elseif redis.call('HGET', flow.key, 'st:' .. n) == 'Q' then
    redis.call('HSET', flow.key, 'pay:' .. n, payload)
  end
end

-- A template with each "@<step>" replaced by that step's result (JSON).
local function flow_fill(flow, template)
  local wanted = {}
  for m in string.gmatch(template, '@(%d+)') do
    wanted[#wanted + 1] = 'r:' .. m
  end
  -- In pages: unpack() gives Lua's stack a few thousand values at most (8,000 fail),
  -- and a fan-in waits for up to MAX_STEPS results.
  local values, i = {}, 0
  for first = 1, #wanted, 1000 do
    local last = math.min(first + 999, #wanted)
    local page = redis.call('HMGET', flow.key, unpack(wanted, first, last))
    for j = 1, #page do
      values[first + j - 1] = page[j]
    end
  end
  return (string.gsub(template, '@%d+', function()
    i = i + 1
    return values[i] or 'null'
  end))
end

-- The step's payload with its first argument (the results its template names).
local function flow_payload(flow, n, now)
  local got = redis.call('HMGET', flow.key, 'head:' .. n, 'tail:' .. n, 'in:' .. n)
  local head, tail, template = got[1], got[2] or '', got[3]
  local input = template and flow_fill(flow, template) or ''
  return queue_stamp(head .. input .. tail, now)
end

-- Write released step n, as "payload" at "rank", to the workflows' outbox
-- (flow.released): its task id and its entry there.
local function flow_outbox(flow, n, rank, payload)
  local got = redis.call('HMGET', flow.key, 'id:' .. n, 'q:' .. n)
  local entry = got[2] .. '\n' .. rank .. '\n' .. payload
  redis.call('HSET', flow.released, got[1], entry)
  return got[1], entry
end

-- Enqueue step n: its result hash and its queue's ready ZSET are "result" and "ready";
-- or, for a workflow whose steps live in their queues' homes (flow.released, the
-- workflows' outbox), write it there (see above).
local function flow_enqueue(flow, n, result, ready, now, keep)
  local payload = flow_payload(flow, n, now)
  local rank = redis.call('HGET', flow.key, 'rank:' .. n)
  -- Released once (from W only): what made its payload is not needed again.
  redis.call('HDEL', flow.key, 'head:' .. n, 'tail:' .. n, 'in:' .. n, 'rank:' .. n)
  if flow.released then
    local id, entry = flow_outbox(flow, n, rank, payload)
    flow.out[#flow.out + 1] = id
    flow.out[#flow.out + 1] = entry
  else
    queue_ready(ready, flow.counter, tonumber(rank), payload)
    queue_result(result, payload, now, keep)
  end
  flow_mark(flow, n, 'W', 'Q')
  redis.call('HSET', flow.key, 'pay:' .. n, payload)
end

-- Enqueue step n, the slot-th child of the step being settled (its keys are there).
local function flow_release(flow, n, slot, now, keep)
  flow_enqueue(flow, n, KEYS[flow.kids + 2 * (slot - 1)], KEYS[flow.kids + 2 * slot - 1], now,
    keep)
end

local function flow_finish(flow, now, keep)
  if redis.call('HGET', flow.key, 'status') == 'RUNNING' then
    redis.call('HSET', flow.key, 'status', 'SUCCESSFUL')
  end
  redis.call('HSET', flow.key, 'finished_at', now)
  local id = redis.call('HGET', flow.key, 'id')
  redis.call('ZREM', flow.live, id)
  redis.call('ZADD', flow.done, now, id)
  redis.call('ZREMRANGEBYSCORE', flow.done, '-inf', now - keep)
  redis.call('PEXPIRE', flow.key, keep)
end

local function flow_fail(flow, failed_id)
  if redis.call('HGET', flow.key, 'status') == 'RUNNING' then
    redis.call('HSET', flow.key, 'status', 'FAILED', 'failed', failed_id)
  end
end

-- Waiting step c is not run (a step it waits for failed, or was not run itself).
local function flow_not_run(flow, work, c, id, failed_id)
  flow_mark(flow, c, 'W', 'N')
  work[#work + 1] = {c, 'N', cjson.encode({step = id, status = 'NOT_RUN', failed = failed_id})}
  flow_fail(flow, failed_id)
end

-- A barrier b (a node with no "id:<b>": no task, not a step) stands between many parents
-- and many children (chain(group(N), group(M)): N + M fields, not N x M). A parent of it
-- has ended in state s. Its children are released once every parent has ended, given
-- "r:<b>" (its template filled) as their input; a failed parent marks at once those
-- that do not allow it as not run, a parent not run all of them.
local function flow_barrier(flow, b, s, work, failed_id, now, keep)
  local kids = redis.call('HGET', flow.key, 'kids:' .. b) or ''
  if s == 'N' then
    redis.call('HSET', flow.key, 'st:' .. b, 'N')
    for c in string.gmatch(kids, '%d+') do
      local got = redis.call('HMGET', flow.key, 'st:' .. c, 'id:' .. c)
      if got[1] == 'W' then
        flow_not_run(flow, work, c, got[2], failed_id)
      end
    end
    return
  end
  if s ~= 'S' and redis.call('HSETNX', flow.key, 'bf:' .. b, '1') == 1 then
    for c in string.gmatch(kids, '%d+') do
      local got = redis.call('HMGET', flow.key, 'st:' .. c, 'id:' .. c, 'af:' .. c)
      if got[1] == 'W' and got[3] ~= '1' then
        flow_not_run(flow, work, c, got[2], failed_id)
      end
    end
  end
  if redis.call('HINCRBY', flow.key, 'deps:' .. b, -1) ~= 0 then
    return
  end
  redis.call('HSET', flow.key, 'st:' .. b, 'S')
  local template = redis.call('HGET', flow.key, 'in:' .. b)
  if template then
    redis.call('HSET', flow.key, 'r:' .. b, flow_fill(flow, template))
    redis.call('HDEL', flow.key, 'in:' .. b)
  end
  local base = keys_base(flow.counter, 'counter')  -- (the workflow's home)
  for c in string.gmatch(kids, '%d+') do
    local got = redis.call('HMGET', flow.key, 'st:' .. c, 'id:' .. c, 'q:' .. c)
    if got[1] == 'W' and redis.call('HINCRBY', flow.key, 'deps:' .. c, -1) == 0 then
      local result, ready = keys_name(base, 'result', got[2]), keys_name(base, 'ready', got[3])
      flow_enqueue(flow, c, result, ready, now, keep)
    end
  end
end

-- Record the final outcome of released step n: state S (record: its return value), F
-- or C (record: its failure record). Only its first final outcome counts. Its children
-- whose parents are all final are released (after a failure, only those that allow it);
-- a child that does not allow a failed parent is not run, nor is anything after it.
-- Returns true when this call counted the outcome.
local function flow_settle(flow, n, state, record, now, keep)
  local status = flow_status(flow)
  if not status or redis.call('HGET', flow.key, 'st:' .. n) ~= 'Q' then
    return false
  end
  local failed_id = redis.call('HGET', flow.key, 'id:' .. n)
  if flow.released and failed_id then
    -- It ran: a copy of its release still in the outbox (a carry that died before it
    -- deleted it) must not enqueue it again once its result has expired.
    redis.call('HDEL', flow.released, failed_id)
  end
  local work, i = {{n, state, record}}, 1
  local left = 0
  while i <= #work do
    local m, s, rec = work[i][1], work[i][2], work[i][3]
    if i == 1 then  -- (each later m was marked not run when it was found)
      flow_mark(flow, m, 'Q', s)
    end
    i = i + 1
    redis.call('HSET', flow.key, 'r:' .. m, rec)
    left = redis.call('HINCRBY', flow.key, 'left', -1)
    local kids = redis.call('HGET', flow.key, 'kids:' .. m) or ''
    if s ~= 'S' and kids == '' then
      flow_fail(flow, failed_id)
    end
    local slot = 0  -- (a barrier has no keys in KEYS)
    for c in string.gmatch(kids, '%d+') do
      local fields = redis.call('HMGET', flow.key, 'st:' .. c, 'af:' .. c, 'id:' .. c)
      if not fields[3] then
        if fields[1] == 'W' then
          flow_barrier(flow, c, s, work, failed_id, now, keep)
        end
      else
        slot = slot + 1
        if fields[1] == 'W' then
          if s == 'S' or (s ~= 'N' and fields[2] == '1') then
            -- (Only step n's children can be released: every later m was not run.)
            if redis.call('HINCRBY', flow.key, 'deps:' .. c, -1) == 0 then
              flow_release(flow, c, slot, now, keep)
            end
          else
            flow_not_run(flow, work, c, fields[3], failed_id)
          end
        end
      end
    end
  end
  if left == 0 then
    flow_finish(flow, now, keep)
  end
  return true
end

-- The failure record a child that allows it gets in place of the result of the step.
local function flow_failure(flow, status, error)
  local id = flow.id or redis.call('HGET', flow.key, 'id:' .. flow.step)
  local record = '{"step":' .. cjson.encode(id) .. ',"status":"' .. status .. '"'
  if error and error ~= '' then
    record = record .. ',"error":' .. error
  end
  return record .. '}'
end

-- The final outcome of the step (state S, F or C; record: its return value or failure
-- record): settled here, in its workflow's home, or written to its home's outbox.
local function flow_outcome(flow, state, record, now, keep)
  if flow.outbox then
    redis.call('HSET', flow.outbox, flow.id, flow.entry .. ' ' .. state .. ' ' .. record)
    redis.call('HDEL', flow.waiting, flow.id)
  else
    flow_settle(flow, flow.step, state, record, now, keep)
  end
end

-- The step, in another home than its workflow, is neither waiting nor running when its
-- workflow is cancelled: it is given the outcome CANCELLED, unless it has one in the
-- outbox already (one carried before counts first anyway).
local function flow_gone(flow)
  if flow.outbox then
    local record = flow_failure(flow, 'CANCELLED')
    redis.call('HSETNX', flow.outbox, flow.id, flow.entry .. ' C ' .. record)
    redis.call('HDEL', flow.waiting, flow.id)
  end
end

-- Whether the step's workflow was cancelled: its status, in the workflow's home;
-- elsewhere, what the cancel wrote in the step's result hash ("result").
local function flow_cancelled(flow, result)
  if flow.outbox then
    return redis.call('HGET', result, 'workflow') == 'CANCELLED'
  end
  return flow_status(flow) == 'CANCELLED'
end
