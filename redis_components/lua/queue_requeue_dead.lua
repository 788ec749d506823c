-- KEYS: 1) the queue's dead-letter list  2) the queue's ready list (also the name of its
--       wake-up channel)
-- ARGV: pairs of: a dead-letter entry, the payload to enqueue in its place
-- Returns: the number of entries moved (an entry no longer in the list is skipped)
local was_empty = redis.call('LLEN', KEYS[2]) == 0
local moved = 0
for i = 1, #ARGV, 2 do
  if redis.call('LREM', KEYS[1], 1, ARGV[i]) == 1 then
    redis.call('RPUSH', KEYS[2], ARGV[i + 1])
    moved = moved + 1
  end
end
if moved > 0 and was_empty then
  redis.call('PUBLISH', KEYS[2], 'ready')
end
return moved
