-- Workflows (see tasks/workflows.py): included by every script that records a final
-- outcome of a task, so that the steps after it are released, or marked not run, in the
-- script that records it. A workflow is one HASH (its "flow section" starts at KEYS[base]):
--   KEYS base) the workflow's HASH  base+1) the enqueue counter  base+2) the ZSET of live
--   workflows  base+3) the ZSET of finished ones; then for each child of the step (in
--   the order of its "kids:<n>" field): its result hash, its queue's ready ZSET
-- Fields of the HASH: status (RUNNING, SUCCESSFUL, FAILED, CANCELLED), id, created_at,
-- finished_at, failed (the task id of the step whose failure failed it), left (steps
-- not final); per step n: id:<n> (task id), st:<n> (W waiting for its parents, Q
-- released, S succeeded, F failed, C cancelled, N not run), deps:<n> (parents not final),
-- kids:<n> ("3,4"), af:<n> ("1": runs after a failed parent, given its failure record),
-- head:<n> and tail:<n> (its payload around its first argument, in:<n>, a template
-- of "@<step>" references), rank:<n> (its ready score before the counter), pay:<n>
-- (its payload once released), r:<n> (its return value, or its failure record, JSON).

local function flow_open(base)
  return {key = KEYS[base], counter = KEYS[base + 1], live = KEYS[base + 2],
    done = KEYS[base + 3], kids = base + 4}
end

local function flow_status(flow)
  return redis.call('HGET', flow.key, 'status')
end

-- The step's payload with its first argument (the results its template names).
local function flow_payload(flow, n, now)
  local got = redis.call('HMGET', flow.key, 'head:' .. n, 'tail:' .. n, 'in:' .. n)
  local head, tail, template = got[1], got[2] or '', got[3]
  local input = ''
  if template then
    local wanted = {}
    for m in string.gmatch(template, '@(%d+)') do
      wanted[#wanted + 1] = 'r:' .. m
    end
    local values, i = {}, 0
    if #wanted > 0 then
      values = redis.call('HMGET', flow.key, unpack(wanted))
    end
    input = string.gsub(template, '@%d+', function()
      i = i + 1
      return values[i] or 'null'
    end)
  end
  local body = string.match(head .. input .. tail, '^(.*),"retries":0}$')
  return body .. ',"enqueued_at":' .. now .. ',"retries":0}'
end

-- Enqueue step n, the slot-th child of the step being settled (its keys are there).
local function flow_release(flow, n, slot, now, keep)
  local result, ready = KEYS[flow.kids + 2 * (slot - 1)], KEYS[flow.kids + 2 * slot - 1]
  local payload = flow_payload(flow, n, now)
  local rank = tonumber(redis.call('HGET', flow.key, 'rank:' .. n))
  redis.call('ZADD', ready, rank + redis.call('INCR', flow.counter), payload)
  if redis.call('ZCARD', ready) == 1 then
    redis.call('PUBLISH', ready, 'ready')
  end
  redis.call('HSET', result, 'status', 'READY', 'message', payload, 'enqueued_at', now)
  redis.call('PEXPIRE', result, keep)
  redis.call('HSET', flow.key, 'st:' .. n, 'Q', 'pay:' .. n, payload)
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
    i = i + 1
    redis.call('HSET', flow.key, 'st:' .. m, s, 'r:' .. m, rec)
    left = redis.call('HINCRBY', flow.key, 'left', -1)
    local kids = redis.call('HGET', flow.key, 'kids:' .. m) or ''
    if s ~= 'S' and kids == '' then
      flow_fail(flow, failed_id)
    end
    local slot = 0
    for c in string.gmatch(kids, '%d+') do
      slot = slot + 1
      local fields = redis.call('HMGET', flow.key, 'st:' .. c, 'af:' .. c, 'id:' .. c)
      if fields[1] == 'W' then
        if s == 'S' or (s ~= 'N' and fields[2] == '1') then
          -- (Only step n's children can be released: every later m was not run.)
          if redis.call('HINCRBY', flow.key, 'deps:' .. c, -1) == 0 then
            flow_release(flow, c, slot, now, keep)
          end
        else
          redis.call('HSET', flow.key, 'st:' .. c, 'N')
          work[#work + 1] = {c, 'N', cjson.encode({step = fields[3], status = 'NOT_RUN',
            failed = failed_id})}
          flow_fail(flow, failed_id)
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
