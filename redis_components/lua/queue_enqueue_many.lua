-- Add many tasks to their queues in one home (enqueue_many: see tasks/store/queues.py).
-- KEYS: 1) the enqueue counter of the home; then 4 for each task: its queue's ready ZSET
--       (also the name of its wake-up channel), its queue's delayed ZSET, its result
--       hash, the key that makes it unique (any key of the home when it is not)
-- ARGV: 1) how long to keep a result after its last change, in ms; then 7 for each
--       task, as queue_enqueue.lua's: its payload, its rank, when it is due, its
--       queue's most waiting tasks (0 for unbounded), its id, for how many ms an equal
--       task is not enqueued again (0 for no limit), its queue's name to count it in the
--       metrics' tasks added ("": not counted)
-- Returns: for each task, {1, the server's time of the enqueue} or {2, the id of the
--          equal task enqueued in its unique window (it was not added)}; or {0, the
--          first task's number (1-based) whose queue would pass its limit}: then no
--          task was added, since the queues' limits are checked for all the tasks first.
-- @include enqueue
local keep, now = tonumber(ARGV[1]), queue_now()
local count = (#KEYS - 1) / 4
local adding = {}  -- per limited queue: how many of its tasks come, and the first's number
for i = 1, count do
  local ready = KEYS[4 * i - 2]
  if tonumber(ARGV[7 * i - 2]) > 0 then
    local seen = adding[ready] or {0, i}
    seen[1] = seen[1] + 1
    adding[ready] = seen
  end
end
for i = 1, count do
  local ready = KEYS[4 * i - 2]
  local seen = adding[ready]
  if seen and seen[2] == i
      and enqueue_full(KEYS[1], ready, KEYS[4 * i - 1], tonumber(ARGV[7 * i - 2]), seen[1]) then
    return {0, i}
  end
end
local added = {}
for i = 1, count do
  local at = 7 * i - 5
  added[i] = enqueue_task(KEYS[4 * i - 2], KEYS[4 * i - 1], KEYS[1], KEYS[4 * i],
    KEYS[4 * i + 1], ARGV[at], tonumber(ARGV[at + 1]), ARGV[at + 2], 0, keep,
    ARGV[at + 4], tonumber(ARGV[at + 5]), ARGV[at + 6], now)
end
return added
