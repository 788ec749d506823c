-- Add many tasks to their queues in one home (enqueue_many: see tasks/store/queues.py).
-- KEYS: 1) the enqueue counter of the home
-- ARGV: 1) how long to keep a result after its last change, in ms  2) how many queues;
--       then 3 for each queue: its name, its most waiting tasks (0 for unbounded: see
--       lib/enqueue.lua), "1" to count its tasks in the metrics' tasks added ("": not);
--       then 4 for each task: its queue's number among them, its payload (ending in
--       '"retries":0}': see messages.py), when it is due (as queue_enqueue.lua's ARGV
--       2), and "" or, for a unique task, "<ms> <key>": for how many ms an equal task
--       is not enqueued again, and the key that makes it unique
-- Returns: for each task, {1, the server's time of the enqueue} or {2, the id of the
--          equal task enqueued in its unique window (it was not added)}; or {0, the
--          number (1-based) of the first task of a queue that its limit refuses}: then
--          no task was added, since the queues' limits are checked for all first (a
--          duplicate does not count against them).
-- Each task's keys (its queue's ready and delayed sets, its result) are named here from
-- KEYS[1]'s home (lib/keys.lua), in its slot: sent once per queue, not per task, so
-- that a call is half as long to send.
-- @include enqueue
local keep, now, counter = tonumber(ARGV[1]), queue_now(), KEYS[1]
local base = keys_base(counter, 'counter')
local queues, first = {}, 3 + 3 * tonumber(ARGV[2])
for q = 1, tonumber(ARGV[2]) do
  local name = ARGV[3 * q]
  queues[q] = {ready = keys_name(base, 'ready', name), delayed = keys_name(base, 'delayed', name),
    limit = tonumber(ARGV[3 * q + 1]), counted = ARGV[3 * q + 2] == '1' and name or '',
    adding = 0}
end
local count = (#ARGV - first + 1) / 4
-- How many tasks each limited queue gets: not a unique task whose equal was added in its
-- window, nor the twin of one before it in this call (each is a duplicate, not added).
local seen = {}
for i = 1, count do
  local at = first + 4 * i - 4
  local q = queues[tonumber(ARGV[at])]
  if q.limit > 0 then
    local key = string.match(ARGV[at + 3], '^%d+ (.*)$')
    if not (key and (seen[key] or redis.call('EXISTS', key) == 1)) then
      q.adding = q.adding + 1
      q.first = q.first or i
    end
    if key then
      seen[key] = true
    end
  end
end
for _, q in ipairs(queues) do
  if q.adding > 0 and enqueue_full(counter, q.ready, q.delayed, q.limit, q.adding) then
    return {0, q.first}
  end
end
local added = {}
for i = 1, count do
  local at = first + 4 * i - 4
  local q, payload, unique = queues[tonumber(ARGV[at])], ARGV[at + 1], ARGV[at + 3]
  local id, unique_ms, unique_key = queue_id(payload), 0, ''
  if unique ~= '' then
    local ms
    ms, unique_key = string.match(unique, '^(%d+) (.*)$')
    unique_ms = tonumber(ms)
  end
  added[i] = enqueue_task(q.ready, q.delayed, counter, keys_name(base, 'result', id), unique_key,
    payload, queue_rank(payload), ARGV[at + 2], 0, keep, id, unique_ms, q.counted, now)
end
return added
