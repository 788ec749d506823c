-- KEYS: 1) the queue's ready list (also the name of its wake-up channel)
-- ARGV: 1) the task payload
-- Returns: the length of the ready list
-- The hot path of enqueue (unbounded queue, due now); queue_enqueue does the rest.
local length = redis.call('RPUSH', KEYS[1], ARGV[1])
-- Only the first task of an empty queue wakes idle workers: a worker that saw the
-- queue empty is woken by that task, and takes tasks until the queue is empty again.
if length == 1 then
  redis.call('PUBLISH', KEYS[1], 'ready')
end
return length
