-- KEYS: 1) the ZSET of worker leases (member: worker id, score: expiry in epoch ms)
--       2) the hash of worker descriptions (worker id -> JSON)  3) the set of queue names
-- ARGV: 1) the worker's id  2) the lease in ms  3) the worker's description (JSON)
--       4) at most this many expired workers are returned  5...) the worker's queues
-- Returns: the ids of workers whose lease has run out (never the caller's own)
local time = redis.call('TIME')
local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
-- Registration; a worker that was taken for dead (its tasks recovered) registers again.
if redis.call('ZADD', KEYS[1], now + tonumber(ARGV[2]), ARGV[1]) == 1 then
  redis.call('HSET', KEYS[2], ARGV[1], ARGV[3])
  redis.call('SADD', KEYS[3], unpack(ARGV, 5))
end
return redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', '(' .. now, 'LIMIT', 0, tonumber(ARGV[4]))
