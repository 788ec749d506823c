-- KEYS: 1) the hash of crash counts  2) the ZSET of worker leases, then for each queue
--       the worker serves, in priority order: its ready list, its delayed ZSET, and the
--       worker's in-progress list for it
-- ARGV: 1) the worker's id
--       2) the position (1-based) of the queue of a finished task to acknowledge, 0 for none
--       3) that task's payload  4) its id  5) 1 to take a task, 0 to only acknowledge
--       6) 1 to move due delayed tasks to their ready lists, 0 not to
--       7) at most this many delayed tasks are moved per queue and call
--       8...) each queue's wake-up channel, in the order of KEYS
-- Returns: {payload, position of its queue, wait}: payload is false when no task was
--          taken; wait is the number of ms until the next delayed task is due (0 when
--          more are due now, -1 when none is or ARGV[6] is 0). Position -1: the worker
--          has no lease (it was taken for dead), so it is given nothing until it registers.
local queues = (#KEYS - 2) / 3
local done = tonumber(ARGV[2])
if done > 0 then
  redis.call('LREM', KEYS[3 * done + 2], -1, ARGV[3])
  redis.call('HDEL', KEYS[1], ARGV[4])
end
if ARGV[5] == '1' and not redis.call('ZSCORE', KEYS[2], ARGV[1]) then
  return {false, -1, 0}
end

local wait = -1
local woken = {}
if ARGV[6] == '1' then
  local time = redis.call('TIME')
  local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
  local limit = tonumber(ARGV[7])
  for i = 1, queues do
    local ready, delayed = KEYS[3 * i], KEYS[3 * i + 1]
    local due = redis.call('ZRANGEBYSCORE', delayed, '-inf', now, 'LIMIT', 0, limit)
    if #due > 0 then
      redis.call('ZREM', delayed, unpack(due))
      if redis.call('RPUSH', ready, unpack(due)) == #due then
        woken[#woken + 1] = i
      end
    end
    local first = redis.call('ZRANGE', delayed, 0, 0, 'WITHSCORES')
    if first[2] then
      local until_due = math.max(0, tonumber(first[2]) - now)
      if wait < 0 or until_due < wait then
        wait = until_due
      end
    end
  end
end

local payload, position = false, 0
if ARGV[5] == '1' then
  for i = 1, queues do
    payload = redis.call('LMOVE', KEYS[3 * i], KEYS[3 * i + 2], 'LEFT', 'RIGHT')
    if payload then
      position = i
      break
    end
  end
end
-- Tasks this call made ready in an empty queue, and did not take itself, wake the
-- other idle workers of that queue (as an enqueued task would).
for _, i in ipairs(woken) do
  if redis.call('LLEN', KEYS[3 * i]) > 0 then
    redis.call('PUBLISH', ARGV[7 + i], 'ready')
  end
end
return {payload, position, wait}
