-- KEYS: 1) a queue's ready ZSET  2) its delayed ZSET  3) the enqueue counter of their
--       home (whose head names the tasks' result hashes)
-- ARGV: none
-- Returns: {the server's time (epoch ms), since when the oldest ready task of the queue
--          in this home has been ready (epoch ms), -1 when none is or none says when}
-- Read only. Within one priority band of the ready ZSET the first task is the one made
-- ready first (lib/queue.lua: the enqueue counter orders it), so the oldest ready task
-- is the first of one of the bands: the script reads the first of each non-empty band,
-- jumping from band to band (one ZRANGEBYSCORE each: a queue uses a few priorities, at
-- most 201), and past the tasks recovered from a dead worker at its head (below). A
-- task is ready since the latest time its result knows it was not yet: its
-- enqueue, the time it was due (run_after), its last attempt's start (a task waiting to
-- run again: an upper bound of its age, which then includes that attempt's run and its
-- retry delay); the enqueue time its payload carries when its result has expired. A
-- delayed task that is due but not moved yet (no worker took from the queue since) is
-- ready since it was due. Tasks waiting for a concurrency permit are not ready.
-- @include keys
-- @include queue

local HEALTH_BANDS = 202  -- (201 priorities; a score that is not a rank ends the walk)
local HEALTH_PUT_BACK = 16  -- the most tasks read at the head of a band

-- Since when the task ``payload`` (in the home ``base``) has been ready, by what its
-- result and its payload say (nil when neither says).
local function health_since(base, payload)
  -- (Its payload's enqueue time, or when it was due if it was enqueued with a delay.)
  local since
  for _, stamp in ipairs({'"due_at"', '"enqueued_at"'}) do
    since = since or tonumber(string.match(payload, ',' .. stamp .. ':(%d+),"retries":%d+}$')
      or string.match(payload, ',' .. stamp .. ':(%d+),"retries":%d+,"crashes":%d+}$'))
  end
  local id = queue_id(payload)
  if id then
    local known = redis.call('HMGET', keys_name(base, 'result', id),
      'enqueued_at', 'run_after', 'last_attempted_at')
    for i = 1, 3 do
      local at = tonumber(known[i])
      if at and (not since or at > since) then
        since = at
      end
    end
  end
  return since
end

local base = keys_base(KEYS[3], 'counter')
local now, oldest = queue_now(), -1
local score = tonumber(redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')[2])
for _ = 1, HEALTH_BANDS do
  if not score or score ~= score or score == math.huge or score == -math.huge then
    break
  end
  local band = math.floor(score / QUEUE_BAND) * QUEUE_BAND
  local low, high = string.format('%.0f', band), string.format('(%.0f', band + QUEUE_BAND)
  -- A task recovered from a dead worker went back where it was first taken (its payload
  -- ends with its crash count): it is read, and so is the one after it, up to the first
  -- that sits where it entered the ready set (those after it entered later).
  local head = redis.call('ZRANGEBYSCORE', KEYS[1], low, high, 'LIMIT', 0, HEALTH_PUT_BACK)
  for _, payload in ipairs(head) do
    local since = health_since(base, payload)
    if since and (oldest < 0 or since < oldest) then
      oldest = since
    end
    if not string.match(payload, ',"crashes":%d+}$') then
      break
    end
  end
  local after = string.format('%.0f', band + QUEUE_BAND)
  score = tonumber(redis.call('ZRANGEBYSCORE', KEYS[1], after, '+inf', 'WITHSCORES', 'LIMIT', 0, 1)[2])
end
local due = redis.call('ZRANGE', KEYS[2], 0, 0, 'WITHSCORES')[2]
due = due and tonumber(due)
if due and due <= now and (oldest < 0 or due < oldest) then
  oldest = due
end
return {now, oldest}
