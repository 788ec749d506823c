-- The take of a task under its limits, as queue_fetch.lua's last part.
-- @include keys
-- @include queue
-- @include attempts
-- @include limits
-- @include limit_settings

local TAKE_REFUSALS = 50  -- at most this many tasks over their limits are set aside per call

-- Takes the first task of the first non-empty of ``count`` lanes (lib/queue.lua's
-- queue_lane, from KEYS[first]) that its limits let start, into the worker's
-- in-progress ZSET with its ready score, so that recovery puts it back where it was. A
-- task over a limit is set aside (lib/limits.lua) and the next one is tried; after
-- TAKE_REFUSALS of them, the worker is told to call again at once (wait 0).
-- ``o``: queue_fetch.lua's options ("worker", "ahead": the task is held ahead, its
-- score negated until a later call starts it; "start_score" and "start_payload": the
-- task held ahead that starts now); ``running``: the HASH of running tasks;
-- ``totals``: the HASH of running totals (false without metrics); ``base``: the queues'
-- home (keys_base); ``settings``: limits_settings'; ``wait``: the ms until a
-- delayed task is due (-1 for none); ``start``: the lane of the task held ahead that
-- starts now when it is surely still held (0 for none): its score is written in the
-- same ZADD when the take is in its lane.
-- Returns the payload (false for none), its lane, its score, the wait (lowered to when
-- a task set aside may start) and whether the start was written.
local function take_next(o, first, count, running, totals, base, settings, now, wait, start)
  local refused = 0
  for i = 1, count do
    local ready, _, taken = queue_lane(first, i)
    local popped = redis.call('ZPOPMIN', ready)
    while popped[1] and refused < TAKE_REFUSALS do
      local limits, id = limits_of(popped[1]), queue_id(popped[1])
      if not (limits and id) then
        break
      end
      if settings then
        limits_set(limits, settings)
      end
      local name = keys_queue_of(base, ready)
      local allowed, at, kind = limits_take(base, limits, id, name, popped[2], popped[1], now)
      if allowed then
        break
      end
      if totals then  -- metrics.py's count of the tasks set aside
        redis.call('HINCRBY', totals, name .. ':limited:' .. kind, 1)
      end
      refused = refused + 1
      if at and (wait < 0 or at - now < wait) then
        wait = at - now
      end
      popped = refused < TAKE_REFUSALS and redis.call('ZPOPMIN', ready) or {}
    end
    if refused >= TAKE_REFUSALS then
      return false, 0, 0, 0, false
    end
    if popped[1] then
      local payload, score = popped[1], popped[2]
      local held = o.ahead and -tonumber(score) or score
      if start == i then
        redis.call('ZADD', taken, o.start_score, o.start_payload, held, payload)
      else
        redis.call('ZADD', taken, held, payload)
      end
      local id = queue_id(payload)
      if id then
        attempts_add(running, id, now .. ' ' .. o.worker)
      end
      return payload, i, score, wait, start == i
    end
  end
  return false, 0, 0, wait, false
end

-- Tasks a call made ready in an empty queue (``woken``: their ready ZSETs), that it
-- did not take itself, wake the other idle workers of that queue (as an enqueued task
-- would).
local function take_wake(woken)
  for _, ready in ipairs(woken) do
    if redis.call('ZCARD', ready) > 0 then
      redis.call('PUBLISH', ready, 'ready')
    end
  end
end
