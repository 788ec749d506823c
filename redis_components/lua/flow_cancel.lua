-- KEYS: 1) the workflow's HASH  2) the task system's enqueue counter  3) the ZSET of live
--       workflows  4) the ZSET of finished ones  5) the HASH of running tasks; then for
--       each step, in order: its result hash, its queue's ready ZSET, its delayed ZSET,
--       its termination request key (for a step in another home: the workflows' outbox
--       of released steps, then any 3 keys of this home)
-- ARGV: 1) "terminate": running steps are asked to stop; "" lets them finish
--       2) how long to keep a result after its last change, in ms  3) how long a
--       termination request waits for the worker to act on it, in ms  4) for each step,
--       in order, "1" when it lives in another home than its workflow (its queue's: see
--       lib/flow.lua), else "0"
-- Returns: {cancelled, status, dropped, running, queued, outboxed}: cancelled is 1 when this
--          call cancelled the workflow, 0 when it had finished or was cancelled already
--          (nothing changed; cancelled already and not finished, "queued" still lists
--          its released steps in other homes); status is its status as it was (false when no such
--          workflow is kept); dropped: the steps that will not run (waiting, or taken
--          out of their queue); running: the steps still running (asked to stop with
--          "terminate"); queued: the task ids of the released steps in other homes,
--          which this script cannot reach: the caller cancels each there
--          (queue_cancel.lua, "workflow"), and their outcomes settle them; outboxed:
--          those it took out of the workflows' outbox before they reached their homes
--          (counted as dropped; cancelled there too, lest a carrier that had read them
--          enqueued them since)
-- Atomic against a worker taking a step: each queued step is either taken (and then
-- running) or removed (from its queue, or from the concurrency limit it waits on). No
-- step in this home starts after this script (one in another home may, until the
-- caller's cancel reaches it there); a running one may still end, and its outcome then
-- releases nothing. A queued step is found in its queue by the payload it waits as
-- (the workflow keeps it, whatever its result hash holds).
-- Every read comes before the first write: an error (a key of another type) changes
-- nothing, as a script's writes are not undone by an error after them.
-- @include keys
-- @include flow
-- @include limits
local status = redis.call('HGET', KEYS[1], 'status')
if not status or redis.call('HGET', KEYS[1], 'finished_at') then
  return {0, status, 0, 0, {}, {}}
end
if status == 'CANCELLED' then
  -- Cancelled already, and not finished: a canceller that died (or lost Redis) may not
  -- have reached each step in another home; they are given again, to cancel there.
  local queued = {}
  for n = 1, (#KEYS - 5) / 4 do
    if string.sub(ARGV[4], n, n) == '1' then
      local got = redis.call('HMGET', KEYS[1], 'st:' .. n, 'id:' .. n)
      if got[1] == 'Q' then
        queued[#queued + 1] = got[2]
      end
    end
  end
  return {0, status, 0, 0, queued, {}}
end
local now = queue_now()
local keep = tonumber(ARGV[2])

-- What becomes of each step not final: {n, its state, its id, the queued deliveries to
-- remove ({ZSET, payload}...), or false when it runs, the payloads it may wait as, and
-- for a step released to the workflows' outbox, that outbox}.
local plan, dropped, running, queued_elsewhere, outboxed = {}, 0, 0, {}, {}
for n = 1, (#KEYS - 5) / 4 do
  local result, ready, delayed = KEYS[4 * n + 2], KEYS[4 * n + 3], KEYS[4 * n + 4]
  local got = redis.call('HMGET', KEYS[1], 'st:' .. n, 'id:' .. n, 'pay:' .. n)
  local st, id = got[1], got[2]
  if st == 'W' then
    dropped = dropped + 1
    plan[#plan + 1] = {n, st, id, {}}
  elseif st == 'Q' and string.sub(ARGV[4], n, n) == '1' then
    if redis.call('HEXISTS', result, id) == 1 then  -- not in its queue yet: it stays out
      dropped = dropped + 1
      plan[#plan + 1] = {n, st, id, {}, {}, result}
      outboxed[#outboxed + 1] = id
    else
      queued_elsewhere[#queued_elsewhere + 1] = id
    end
  elseif st == 'Q' then
    local known = redis.call('HMGET', result, 'payload', 'message')
    known[3] = got[3]
    local queued = {}
    for i = 1, 3 do
      if known[i] then
        for _, zset in ipairs({ready, delayed}) do
          if redis.call('ZSCORE', zset, known[i]) then
            queued[#queued + 1] = {zset, known[i]}
          end
        end
      end
    end
    if #queued == 0 and id and redis.call('HEXISTS', KEYS[5], id) == 1 then
      running = running + 1
      plan[#plan + 1] = {n, st, id, false}
    else  -- taken out of its queue (or gone from it: it will not run either)
      dropped = dropped + 1
      plan[#plan + 1] = {n, st, id, queued, known}
    end
  end
end
local left = (tonumber(redis.call('HGET', KEYS[1], 'left')) or dropped) - dropped

local flow = flow_open(1)
for _, step in ipairs(plan) do
  local n, st, id, queued = step[1], step[2], step[3], step[4]
  if not queued then
    if ARGV[1] == 'terminate' then
      redis.call('SET', KEYS[4 * n + 5], '1', 'PX', tonumber(ARGV[3]))
    end
  else
    if st == 'Q' then
      for _, entry in ipairs(queued) do
        redis.call('ZREM', entry[1], entry[2])
      end
      -- Or out of the concurrency limit it waits on; its permits go on (lib/limits.lua).
      local base = keys_base(KEYS[2], 'counter')  -- the registry's: every queue's home today
      local queue = keys_queue_of(base, KEYS[4 * n + 3])  -- of its ready ZSET
      for i = 1, 3 do
        local limits = step[5][i] and limits_of(step[5][i])
        if limits then
          limits_unwait(base, limits, queue, step[5][i])
          limits_cancel(base, limits, id, queue, step[5][i], true)
        end
      end
      local result = KEYS[4 * n + 2]
      if step[6] then  -- (the outbox: it has no result yet)
        redis.call('HDEL', step[6], id)
      else
        result_write(result, result_ended({}, 'CANCELLED', now), keep)
      end
    end
    flow_mark(flow, n, st, 'C')
    redis.call('HSET', KEYS[1], 'r:' .. n,
      '{"step":' .. cjson.encode(id) .. ',"status":"CANCELLED"}')
  end
end
redis.call('HSET', KEYS[1], 'status', 'CANCELLED', 'cancelled_at', now, 'left', left)
if left <= 0 then
  flow_finish(flow, now, keep)
end
return {1, status, dropped, running, queued_elsewhere, outboxed}
