-- KEYS: 1) the step's result hash  2) its queue's ready ZSET (also the name of its
--       wake-up channel)  3) the enqueue counter of its home  4) the HASH of the payloads
--       that the workflows' steps of its home wait as (see lib/flow.lua)
-- ARGV: 1) its task id  2) its entry in the workflows' outbox: "<queue>\n<rank>\n
--       <payload>" (see lib/flow.lua)  3) how long to keep a result after its last
--       change, in ms
-- Returns: 1 when the step was enqueued, 0 when it had been already (its result hash
--          exists, or its payload in KEYS[4]: it waits, runs or has run; nothing
--          changed)
-- Enqueues a step that its workflow released (or created ready) in its queue's home.
-- Idempotent: the step's result hash is written with it, and kept long after it ends;
-- KEYS[4] holds it while it waits or runs, however long (its result may expire); and
-- the settling of its outcome deletes the entry from the outbox. So an entry carried
-- twice enqueues it once.
-- @include queue
if redis.call('EXISTS', KEYS[1]) == 1 or redis.call('HEXISTS', KEYS[4], ARGV[1]) == 1 then
  return 0
end
local rank, payload = string.match(ARGV[2], '^[^\n]*\n(%d+)\n(.*)$')
queue_ready(KEYS[2], KEYS[3], tonumber(rank), payload)
queue_result(KEYS[1], payload, queue_now(), tonumber(ARGV[3]))
redis.call('HSET', KEYS[4], ARGV[1], payload)
return 1
