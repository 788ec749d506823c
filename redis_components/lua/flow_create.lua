-- KEYS: 1) the workflow's HASH  2) the task system's enqueue counter  3) the ZSET of live
--       workflows  4) the ZSET of finished ones; then for each step that runs first
--       (ARGV): its queue's ready ZSET (also the name of its wake-up channel), its
--       result hash; or, when the steps live in their queues' homes, the workflows'
--       outbox (see lib/flow.lua), to which the first steps are written
-- ARGV: 1) the workflow's id  2) how long to keep a result after its last change, in ms
--       3) for the metrics' tasks added, its steps per queue: lines "<queue>\n<count>\n"
--       ("": not counted)  4) how many fields the HASH is given; then those fields and
--       their values (see lib/flow.lua), then for each step that runs first: its number,
--       its payload (ending in '"retries":0}': see lib/queue.lua), its rank
-- Returns: the server's time (epoch ms) of the enqueue; false when a workflow of this
--          id exists (nothing changed)
-- One script writes the whole workflow and enqueues its first steps: an enqueue that is
-- interrupted leaves nothing, and no step runs before the workflow exists.
-- @include queue
-- @include flow
if redis.call('EXISTS', KEYS[1]) == 1 then
  return false
end
local now = queue_now()
local keep = tonumber(ARGV[2])
local last = 4 + 2 * tonumber(ARGV[4])
for i = 5, last, 1000 do  -- unpack() takes a few thousand values at most
  redis.call('HSET', KEYS[1], unpack(ARGV, i, math.min(i + 999, last)))
end
redis.call('HSET', KEYS[1], 'id', ARGV[1], 'created_at', now)
local flow = flow_open(1)
flow.released = #KEYS == 5 and KEYS[5]  -- (4 + 2 per step otherwise)
for r = 1, (#ARGV - last) / 3 do
  local n, payload, rank = ARGV[last + 3 * r - 2], ARGV[last + 3 * r - 1], ARGV[last + 3 * r]
  local ready, result = KEYS[3 + 2 * r], KEYS[4 + 2 * r]
  payload = queue_stamp(payload, now)
  if flow.released then
    flow_outbox(flow, n, rank, payload)
  else
    queue_ready(ready, KEYS[2], tonumber(rank), payload)
    queue_result(result, payload, now, keep)
  end
  -- (The fields count it as released already: see workflows.py.)
  redis.call('HSET', KEYS[1], 'st:' .. n, 'Q', 'pay:' .. n, payload)
end
local totals = keys_name(keys_base(KEYS[2], 'counter'), 'totals')
for queue, count in string.gmatch(ARGV[3], '([^\n]*)\n(%d+)\n') do
  redis.call('HINCRBY', totals, queue .. ':added', count)
end
if tonumber(redis.call('HGET', KEYS[1], 'left')) == 0 then  -- nothing to run
  flow_finish(flow, now, keep)
else
  redis.call('ZADD', KEYS[3], now, ARGV[1])
end
return now
