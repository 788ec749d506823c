-- KEYS: 1) the ZSET of worker leases (member: worker id, score: expiry in epoch ms)
--       2) the hash of worker descriptions (worker id -> JSON)  3) the set of queue names
--       4) the scheduler's lease (the id of the one worker whose scheduler claims ticks)
--       5...) the termination request keys of the tasks the worker is running whose
--       home is the registry's (those of other homes are read there)
-- ARGV: 1) the worker's id  2) the lease in ms  3) the worker's description (JSON)
--       4) at most this many expired workers are returned
--       5) 1 when this worker runs a scheduler and may take the scheduler's lease, else 0
--       6) the number of those tasks
--       7...) their ids, then the worker's queues
-- Returns: {ids of workers whose lease has run out (never the caller's own),
--           1 when this worker holds the scheduler's lease, else 0,
--           the ids of its running tasks that are to be terminated,
--           the lease's new expiry (epoch ms),
--           1 when it registered the worker (a first beat, or one taken for dead), else 0}
local time = redis.call('TIME')
local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
-- Registration; a worker that was taken for dead (its tasks recovered) registers again.
local registered = redis.call('ZADD', KEYS[1], now + tonumber(ARGV[2]), ARGV[1])
if registered == 1 then
  redis.call('HSET', KEYS[2], ARGV[1], ARGV[3])
  local first = 7 + tonumber(ARGV[6])
  for i = first, #ARGV, 1000 do  -- unpack() takes a few thousand values at most
    redis.call('SADD', KEYS[3], unpack(ARGV, i, math.min(i + 999, #ARGV)))
  end
end
-- One scheduler at a time claims the schedules' ticks (a claim is atomic anyway: this
-- only saves the others the work). Its lease is renewed with its heartbeats.
local leader = 0
if ARGV[5] == '1' then
  if redis.call('SET', KEYS[4], ARGV[1], 'NX', 'PX', ARGV[2]) then
    leader = 1
  elseif redis.call('GET', KEYS[4]) == ARGV[1] then
    redis.call('PEXPIRE', KEYS[4], ARGV[2])
    leader = 1
  end
end
local terminate = {}
for i = 1, tonumber(ARGV[6]) do
  if redis.call('DEL', KEYS[4 + i]) == 1 then
    terminate[#terminate + 1] = ARGV[6 + i]
  end
end
local expired = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', '(' .. now, 'LIMIT', 0, tonumber(ARGV[4]))
return {expired, leader, terminate, now + tonumber(ARGV[2]), registered}
