-- KEYS: 1) the ZSET of worker leases (in another home than the registry's: its copy
--       there)  2) the hash of worker descriptions (in another home: its key of
--       that name, which is never written)  3) the HASH of running tasks (task id -> its attempts, see
--       lib/attempts.lua), then for each of the home's queues the
--       worker served: the worker's in-progress ZSET for it, the queue's ready ZSET
--       (also the name of its wake-up channel), its dead-letter list; then the result
--       hash of each task id given in ARGV; then the workflow sections (lib/flow.lua)
--       of those tasks that are workflows' steps
-- ARGV: 1) the worker's id  2) "expired": only if its lease has run out; "now": at once
--       3) count a crash against each recovered task, and dead-letter those that reach
--       this count (by a crash with no other task held); 0 counts nothing (the worker
--       stopped them: no attempt is recorded)
--       4) the most entries a dead-letter list keeps  5) how long to keep a result
--       after its last change, in ms  6) the number of queues
--       7) how many tasks the worker had started in its other homes (a crash in their
--       company is shared too)
--       8...) the name of each queue, in the order of KEYS, then for each task seen in
--       the in-progress ZSETs before this call: its id (its result hash is in KEYS),
--       where its workflow section starts in KEYS (0: it is no workflow's step), its
--       step's argument (lib/flow.lua's flow_open)
-- Returns: {tasks put back on their queue, tasks dead-lettered}, or false when the
--          worker's lease has not run out (nothing changed)
-- A task's crash count travels in its payload: the encoder ends every payload with
-- '"retries":<n>}', and this script alone appends ',"crashes":<n>' before the final
-- brace, with string operations (re-encoding JSON in Lua could alter numbers). A
-- recovered task goes back into its ready ZSET with the score it was taken with, so it
-- runs before every task of its priority enqueued after it. A step of a cancelled
-- workflow is not put back; a step dead-lettered here fails its workflow's later steps.
-- @include flow
-- @include attempts
-- @include limit_runs
local now = queue_now()
if ARGV[2] == 'expired' then
  local expiry = redis.call('ZSCORE', KEYS[1], ARGV[1])
  if expiry and tonumber(expiry) >= now then
    return false
  end
end
redis.call('ZREM', KEYS[1], ARGV[1])
redis.call('HDEL', KEYS[2], ARGV[1])

local max_crashes, keep = tonumber(ARGV[3]), tonumber(ARGV[5])
local queues = tonumber(ARGV[6])
local results, flows = {}, {}
for i = 8 + queues, #ARGV, 3 do
  local nth = (i - 8 - queues) / 3 + 1
  results[ARGV[i]] = KEYS[3 + 3 * queues + nth]
  if ARGV[i + 1] ~= '0' then
    flows[ARGV[i]] = flow_open(tonumber(ARGV[i + 1]), ARGV[i + 2])
  end
end

-- A worker that ran several tasks (thread slots, async tasks) may have been killed by
-- any of them: the crash is counted against each, but charged to none (it never
-- dead-letters a task); a task counting 2 crashes runs alone (worker.py), where the
-- next crash is its own. A task held ahead (a negative score: see queue_fetch.lua) had
-- not started: it goes back with no crash counted, and is not counted here.
local held_total = tonumber(ARGV[7])
for i = 1, queues do
  held_total = held_total + redis.call('ZCOUNT', KEYS[3 * i + 1], 0, '+inf')
end
local shared = held_total > 1

local requeued, buried = 0, 0
for i = 1, queues do
  local running, ready, dead = KEYS[3 * i + 1], KEYS[3 * i + 2], KEYS[3 * i + 3]
  local queue = ARGV[7 + i]
  local was_empty = redis.call('ZCARD', ready) == 0
  local held = redis.call('ZRANGE', running, 0, -1, 'WITHSCORES')
  redis.call('DEL', running)
  local base = keys_base(ready, 'ready:' .. queue)
  for j = 1, #held, 2 do
    local payload, score = held[j], held[j + 1]
    local started = tonumber(score) >= 0
    if not started then
      score = -tonumber(score)
    end
    local counted = max_crashes > 0 and started
    local id = queue_id(payload)
    local limits = id and limits_of(payload)
    if limits then  -- its permits go to the tasks waiting for them
      limits_release(base, limits, id)
    end
    local attempt = id and attempts_remove(KEYS[3], id, redis.call('HGET', KEYS[3], id),
      attempt_of(false, ARGV[1]))
    local error, crashes, charged = nil, 0, true
    if counted then
      local body, count = queue_crashes(payload)
      if body and shared then
        crashes, charged = count + 1, false
        error = 'its worker died while running it and ' .. (held_total - 1) ..
          ' other tasks, any of which may be the cause (crash ' .. crashes ..
          ', not charged: from the second on, it runs alone)'
        payload = queue_crashed(body, crashes)
      elseif body then
        crashes = count + 1
        error = 'its worker died while running it (' .. crashes .. ' of ' .. max_crashes .. ')'
        if crashes < max_crashes then
          payload = queue_crashed(body, crashes)
        end
      else  -- not a task of ours: it cannot be run, so it is not counted either
        crashes, error = max_crashes, 'its worker died while holding it, and it is not a task'
      end
    end
    local flow = id and flows[id]
    local result = id and results[id]
    local cancelled = flow and flow_cancelled(flow, result)
    -- A crash in company is never the one that dead-letters a task.
    local failed = counted and crashes >= max_crashes and charged
    if cancelled then  -- neither put back nor dead-lettered
    elseif failed then
      redis.call('RPUSH', dead, cjson.encode({
        task = payload, queue = queue, reason = 'crashed', error = error,
        traceback = '', failed_at = now / 1000,
      }))
      redis.call('LTRIM', dead, -tonumber(ARGV[4]), -1)
      buried = buried + 1
    else
      redis.call('ZADD', ready, score, payload)
      requeued = requeued + 1
      if flow then
        flow_requeued(flow, flow.step, payload)
      end
    end
    if result and counted then
      local known = redis.call('HMGET', result, 'workers', 'started_at', 'errors')
      local fields = {}
      if attempt then
        result_attempt(fields, attempt, known[1], known[2])
      end
      result_error(fields, known[3], cjson.encode({
        exception_class_path = 'redis_components.exceptions.WorkerCrashed', traceback = error,
      }))
      if failed then
        result_ended(fields, 'FAILED', now)
      else  -- waits to run again: cancelling it needs its new payload
        result_set(fields, 'payload', payload)
      end
      result_write(result, fields, keep)
    end
    if cancelled then
      if result then
        result_write(result, result_ended({}, 'CANCELLED', now), keep)
      end
      flow_outcome(flow, 'C', flow_failure(flow, 'CANCELLED'), now, keep)
    elseif flow and failed then
      flow_outcome(flow, 'F', flow_failure(flow, 'FAILED', cjson.encode({
        exception_class_path = 'redis_components.exceptions.WorkerCrashed', traceback = error,
      })), now, keep)
    end
  end
  -- The runs it held permits for beyond their tasks' records end with it.
  limits_free_runs(base, ARGV[1])
  if was_empty and redis.call('ZCARD', ready) > 0 then
    redis.call('PUBLISH', ready, 'ready')
  end
end
return {requeued, buried}
