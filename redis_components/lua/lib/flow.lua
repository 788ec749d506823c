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
--   kr, kq       the prefixes of a result hash's and a ready ZSET's keys
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
--                is put back (a cancel finds it by this)
--   r:<n>        its return value, or its failure record (JSON)
--   bf:<n>       a barrier's "a parent of it failed" (its children that do not allow it
--                were marked not run)
-- A barrier (see flow_barrier) has st, deps, kids, in, r and bf; it is in no count, nor
-- in "left".
-- @include queue

local function flow_open(base)
  return {key = KEYS[base], counter = KEYS[base + 1], live = KEYS[base + 2],
    done = KEYS[base + 3], kids = base + 4}
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
  if redis.call('HGET', flow.key, 'st:' .. n) == 'Q' then
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

-- Enqueue step n: its result hash and its queue's ready ZSET are "result" and "ready".
local function flow_enqueue(flow, n, result, ready, now, keep)
  local payload = flow_payload(flow, n, now)
  local rank = tonumber(redis.call('HGET', flow.key, 'rank:' .. n))
  -- Released once (from W only): what made its payload is not needed again.
  redis.call('HDEL', flow.key, 'head:' .. n, 'tail:' .. n, 'in:' .. n, 'rank:' .. n)
  queue_ready(ready, flow.counter, rank, payload)
  queue_result(result, payload, now, keep)
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
-- has ended in state s. Its children are released (their keys made from "kr" and "kq"
-- and their id and queue) when every parent has ended, with "r:<b>" (its template
-- filled) as their input; a failed parent marks at once those that do not allow it
-- as not run, a parent not run all of them.
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
  local prefixes = redis.call('HMGET', flow.key, 'kr', 'kq')
  for c in string.gmatch(kids, '%d+') do
    local got = redis.call('HMGET', flow.key, 'st:' .. c, 'id:' .. c, 'q:' .. c)
    if got[1] == 'W' and redis.call('HINCRBY', flow.key, 'deps:' .. c, -1) == 0 then
      flow_enqueue(flow, c, prefixes[1] .. got[2], prefixes[2] .. got[3], now, keep)
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

-- The failure record a child that allows it gets in place of the result of step n.
local function flow_failure(flow, n, status, error)
  local id = redis.call('HGET', flow.key, 'id:' .. n)
  local record = '{"step":' .. cjson.encode(id) .. ',"status":"' .. status .. '"'
  if error and error ~= '' then
    record = record .. ',"error":' .. error
  end
  return record .. '}'
end
