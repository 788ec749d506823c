-- KEYS: 1) the queue's ready ZSET  2) its delayed ZSET  3) its dead-letter list
--       4) the HASH of concurrency limits in use (see lib/limits.lua)  5) the HASH of
--       the payloads that workflows' steps wait as in this home (see lib/flow.lua)
-- ARGV: 1) the queue's name
-- Returns: how many tasks were deleted: ready, delayed, dead, and those of the queue
--          that waited on a concurrency limit
-- The permits that deleted tasks held (handed to them while they waited) go to the
-- tasks of other queues waiting for them; this queue's are deleted first.
-- @include keys
-- @include limits
local base = keys_base(KEYS[1], 'ready:' .. ARGV[1])
local count = redis.call('LLEN', KEYS[3])
local limited = {}
local function deleted(payload)
  count = count + 1
  local id = queue_id(payload)
  if id then
    redis.call('HDEL', KEYS[5], id)
  end
  if limits_of(payload) then
    limited[#limited + 1] = payload
  end
end
for _, key in ipairs({KEYS[1], KEYS[2]}) do
  for _, payload in ipairs(redis.call('ZRANGE', key, 0, -1)) do
    deleted(payload)
  end
end
local head = ARGV[1] .. '\n'
for _, key in ipairs(redis.call('HKEYS', KEYS[4])) do
  local wait = keys_name(base, 'limit_wait', key)
  for _, entry in ipairs(redis.call('ZRANGE', wait, 0, -1)) do
    if string.sub(entry, 1, #head) == head then
      redis.call('ZREM', wait, entry)
      deleted(string.sub(entry, #head + 1))
    end
  end
end
redis.call('DEL', KEYS[1], KEYS[2], KEYS[3])
redis.call('HDEL', keys_name(base, 'limits_waiting'), ARGV[1])
for _, payload in ipairs(limited) do
  local id = queue_id(payload)
  if id then
    limits_cancel(base, limits_of(payload), id, ARGV[1], payload, false)
  end
end
return count
