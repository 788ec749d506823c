-- KEYS: 1) the queue's ready ZSET (also the name of its wake-up channel)
--       2) the queue's delayed ZSET  3) the enqueue counter of the queue's home
--       4) the task's result hash  5) the key that makes it unique (any key of the task
--       system when it is not)
-- ARGV: 1) the task payload, ending in '"retries":0}' (see messages.py): the script
--          stamps its enqueue time (see lib/queue.lua, and lib/enqueue.lua for the rest)
--       2) when it is due: "" now, "+<ms>" after ms by the server's clock, "@<ms>" at epoch ms
--       3) its id
--       4) the options of its task (the same for each of its enqueues: store/calls.py
--          makes them once), a JSON object of what is set of: rank (store.rank: its score
--          in the ready ZSET before the counter is added), limit (the queue's most waiting
--          tasks: ready, delayed, and waiting for a permit of a concurrency limit, see
--          lib/limits.lua; unbounded if unset), keep (how long to keep the result after
--          its last change, in ms), unique_ms (for how many ms an equal task is not
--          enqueued again; no limit if unset), counted (its queue's name, to count it in
--          the metrics' tasks added; not counted if unset)
-- Returns: {1, the server's time (epoch ms) of the enqueue}; {0} when the queue is full;
--          {2, the id of the equal task enqueued in the last unique_ms} (in both last
--          cases nothing changed)
-- @include enqueue
local o = cjson.decode(ARGV[4])
return enqueue_task(KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], ARGV[1], o.rank, ARGV[2],
  o.limit or 0, o.keep or 0, ARGV[3], o.unique_ms or 0, o.counted or '', queue_now())
