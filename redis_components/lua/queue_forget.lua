-- KEYS: 1) the set of queue names workers have served  2) the HASH of how many tasks
--       of each queue wait for a permit of a concurrency limit (see lib/limits.lua)
--       then, for each queue in ARGV 2..., ARGV 1 keys: its ready ZSET, delayed ZSET and
--       dead-letter LIST, and its throughput hashes of the recent hours
-- ARGV: 1) how many keys each queue has in KEYS  2...) the queues' names
-- Returns: how many names were forgotten: those of queues with none of those keys and
--          no task waiting on a limit (no task waiting, no dead letter, no task finished
--          lately), removed from the set
local per, forgotten = tonumber(ARGV[1]), 0
for i = 2, #ARGV do
  local first = 3 + (i - 2) * per
  if redis.call('EXISTS', unpack(KEYS, first, first + per - 1)) == 0
      and redis.call('HEXISTS', KEYS[2], ARGV[i]) == 0 then
    forgotten = forgotten + redis.call('SREM', KEYS[1], ARGV[i])
  end
end
return forgotten
