-- Due delayed tasks to their ready ZSETs, as queue_fetch.lua's second part.
-- @include queue

local MOVE_BATCH = 100  -- at most this many delayed tasks move per queue and call

-- Moves the tasks due at ``now`` of each of ``count`` lanes (lib/queue.lua's
-- queue_lane, from KEYS[first]) to their queue's ready ZSET, ranked by the priority at
-- the start of their payload as enqueue ranks them (lib/queue.lua), in the order they
-- fell due; ``counter``: the enqueue counter of their home. Returns the ms until the
-- next delayed task is due (0 when more are due now, -1 when none is left), and the
-- ready ZSETs that were empty before (take_wake in lib/take.lua wakes their workers).
local function move_due(first, count, counter, now)
  local wait, woken = -1, {}
  for i = 1, count do
    local ready, delayed = queue_lane(first, i)
    local due_first = redis.call('ZRANGE', delayed, 0, 0, 'WITHSCORES')
    if due_first[2] and tonumber(due_first[2]) <= now then
      local due = redis.call('ZRANGEBYSCORE', delayed, '-inf', now, 'LIMIT', 0, MOVE_BATCH)
      redis.call('ZREM', delayed, unpack(due))
      if redis.call('ZCARD', ready) == 0 then
        woken[#woken + 1] = ready
      end
      local at = redis.call('INCRBY', counter, #due) - #due
      for j, payload in ipairs(due) do
        redis.call('ZADD', ready, queue_rank(payload) + at + j, payload)
      end
      due_first = redis.call('ZRANGE', delayed, 0, 0, 'WITHSCORES')
    end
    if due_first[2] then
      local until_due = math.max(0, tonumber(due_first[2]) - now)
      if wait < 0 or until_due < wait then
        wait = until_due
      end
    end
  end
  return wait, woken
end
