-- KEYS: 1) the queue's ready ZSET (also the name of its wake-up channel)
--       2) the queue's delayed ZSET  3) the enqueue counter of the queue's home
--       4) the task's result hash  5) the key that makes it unique (any key of the task
--       system when it is not)
-- ARGV: 1) the task payload, ending in '"retries":0}' (see messages.py): the script
--          stamps its enqueue time (see lib/queue.lua, and lib/enqueue.lua for the rest)
--       2) its rank (store.rank: its score in the ready ZSET before the counter is added)
--       3) when it is due: "" now, "+<ms>" after ms by the server's clock, "@<ms>" at epoch ms
--       4) the queue's most waiting tasks (ready, delayed, and waiting for a permit of a
--       concurrency limit: see lib/limits.lua), 0 for unbounded
--       5) how long to keep the result after its last change, in ms
--       6) its id  7) for how many ms an equal task is not enqueued again, 0 for no limit
--       8) its queue's name, to count it in the metrics' tasks added ("": not counted)
-- Returns: {1, the server's time (epoch ms) of the enqueue}; {0} when the queue is full;
--          {2, the id of the equal task enqueued in the last ARGV 7 ms} (in both last
--          cases nothing changed)
-- @include enqueue
return enqueue_task(KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], ARGV[1], tonumber(ARGV[2]),
  ARGV[3], tonumber(ARGV[4]), tonumber(ARGV[5]), ARGV[6], tonumber(ARGV[7]), ARGV[8],
  queue_now())
