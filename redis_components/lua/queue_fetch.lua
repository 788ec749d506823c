-- KEYS: 1) the ZSET of worker leases, then for each queue the worker serves, in
--       priority order: its ready list (also the name of its wake-up channel), its
--       delayed ZSET, and the worker's in-progress list for it
-- ARGV: 1) the worker's id
--       2) the position (1-based) of the queue of a finished task to acknowledge, 0 for none
--       3) that task's payload
--       4) "take+move", "take" or "": take a task; move due delayed tasks to their queues
-- Returns: {payload, position of its queue, wait}: payload is false when no task was
--          taken; wait is the number of ms until the next delayed task is due (0 when
--          more are due now, -1 when none is or nothing was moved). Position -1: the
--          worker has no lease (it was taken for dead), so it gets nothing until it
--          registers again.
local BATCH = 100  -- at most this many delayed tasks move per queue and call
local queues = (#KEYS - 1) / 3
local done = tonumber(ARGV[2])
if done > 0 then
  redis.call('LREM', KEYS[3 * done + 1], -1, ARGV[3])
end
local take = string.sub(ARGV[4], 1, 4) == 'take'
if take and not redis.call('ZSCORE', KEYS[1], ARGV[1]) then
  return {false, -1, 0}
end

local wait = -1
local woken = {}
if string.sub(ARGV[4], -4) == 'move' then
  local now
  for i = 1, queues do
    local ready, delayed = KEYS[3 * i - 1], KEYS[3 * i]
    local first = redis.call('ZRANGE', delayed, 0, 0, 'WITHSCORES')
    if first[2] then
      if not now then
        local time = redis.call('TIME')
        now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
      end
      if tonumber(first[2]) <= now then
        local due = redis.call('ZRANGEBYSCORE', delayed, '-inf', now, 'LIMIT', 0, BATCH)
        redis.call('ZREM', delayed, unpack(due))
        if redis.call('RPUSH', ready, unpack(due)) == #due then
          woken[#woken + 1] = ready
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
end

local payload, position = false, 0
if take then
  for i = 1, queues do
    payload = redis.call('LMOVE', KEYS[3 * i - 1], KEYS[3 * i + 1], 'LEFT', 'RIGHT')
    if payload then
      position = i
      break
    end
  end
end
-- Tasks this call made ready in an empty queue, and did not take itself, wake the
-- other idle workers of that queue (as an enqueued task would).
for _, ready in ipairs(woken) do
  if redis.call('LLEN', ready) > 0 then
    redis.call('PUBLISH', ready, 'ready')
  end
end
return {payload, position, wait}
