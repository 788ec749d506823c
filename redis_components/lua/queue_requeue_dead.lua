-- KEYS: 1) the queue's dead-letter list  2) the queue's ready ZSET (also the name of its
--       wake-up channel)  3) the enqueue counter of the queue's home, then the result hash of
--       each entry's task (any key of the task system for an entry without one)
-- ARGV: 1) how long to keep a result after its last change, in ms, then for each entry:
--       the dead-letter entry, the payload to enqueue in its place, its rank (see
--       lib/queue.lua), its task id ("" when it has no result hash)
-- Returns: the number of entries moved (an entry no longer in the list is skipped)
-- @include queue
local moved = 0
for i = 2, #ARGV, 4 do
  if redis.call('LREM', KEYS[1], 1, ARGV[i]) == 1 then
    queue_ready(KEYS[2], KEYS[3], tonumber(ARGV[i + 2]), ARGV[i + 1])
    moved = moved + 1
    if ARGV[i + 3] ~= '' then
      local result = KEYS[3 + (i + 2) / 4]
      result_requeued(result, ARGV[i + 1], tonumber(ARGV[1]))
    end
  end
end
return moved
