-- KEYS: 1) the ZSET of worker leases  2) the hash of worker descriptions, then for each
--       queue the worker served: the worker's in-progress list for it, the queue's ready
--       list (also the name of its wake-up channel), its dead-letter list
-- ARGV: 1) the worker's id  2) "expired": only if its lease has run out; "now": at once
--       3) count a crash against each recovered task, and dead-letter those that reach
--       this count; 0 counts nothing  4) the most entries a dead-letter list keeps
--       5...) the name of each queue, in the order of KEYS
-- Returns: {tasks put back on their queue, tasks dead-lettered}, or false when the
--          worker's lease has not run out (nothing changed)
-- A task's crash count travels in its payload: the encoder ends every payload with
-- '"retries":<n>}', and this script alone appends ',"crashes":<n>' before the final
-- brace, with string operations (re-encoding JSON in Lua could alter numbers).
local time = redis.call('TIME')
local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
if ARGV[2] == 'expired' then
  local expiry = redis.call('ZSCORE', KEYS[1], ARGV[1])
  if expiry and tonumber(expiry) >= now then
    return false
  end
end
redis.call('ZREM', KEYS[1], ARGV[1])
redis.call('HDEL', KEYS[2], ARGV[1])

local max_crashes = tonumber(ARGV[3])
local requeued, buried = 0, 0
for i = 1, (#KEYS - 2) / 3 do
  local running, ready, dead = KEYS[3 * i], KEYS[3 * i + 1], KEYS[3 * i + 2]
  local queue = ARGV[4 + i]
  local before = requeued
  -- From the newest to the oldest, each to the head of its queue: the oldest ends first.
  local payload = redis.call('RPOP', running)
  while payload do
    if max_crashes > 0 and string.sub(payload, -1) == '}' then
      local body, crashes = string.match(payload, '^(.*),"crashes":(%d+)}$')
      if not body then
        body, crashes = string.sub(payload, 1, -2), 0
      end
      crashes = tonumber(crashes) + 1
      if crashes >= max_crashes then
        redis.call('RPUSH', dead, cjson.encode({
          task = payload, queue = queue, reason = 'crashed',
          error = 'its worker died while running it ' .. crashes .. ' times',
          traceback = '', failed_at = now / 1000,
        }))
        redis.call('LTRIM', dead, -tonumber(ARGV[4]), -1)
        buried = buried + 1
        payload = nil
      else
        payload = body .. ',"crashes":' .. crashes .. '}'
      end
    end
    if payload then
      redis.call('LPUSH', ready, payload)
      requeued = requeued + 1
    end
    payload = redis.call('RPOP', running)
  end
  if requeued > before then
    redis.call('PUBLISH', ready, 'ready')
  end
end
return {requeued, buried}
