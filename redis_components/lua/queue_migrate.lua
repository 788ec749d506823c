-- Moves into its queue's home a task that a release before homes of their own wrote in
-- the registry's home (tasks/store/migration.py), under the id it has there: written
-- once, whatever the number of processes that move it (a rerun after a crash finds it).
-- KEYS: 1) the task's result hash in its new home  2) where it waits there: the queue's
--       ready or delayed ZSET, or its dead-letter list  3) its unique key there (any key
--       of the home when it is not unique)  4) the queue's ready ZSET (its wake-up channel)
-- ARGV: 1) its payload (its dead letter's entry, for the list)  2) its score in the ZSET
--       ("" for the list)  3) its result's fields as a JSON object  4) how long to keep
--       the result, in ms (0: no expiry)  5) how long the unique key is kept, in ms (0:
--       not unique)  6) its new id
-- Returns: 1 when it moved it, 0 when it was moved already, or {2, the id of the equal
--          task that its unique key names} (in the last two cases nothing changed). A
--          dead letter whose result expired has no result to find: moved twice, if the
--          process that moved it died before it was taken out of the registry's home.
-- @include result
if ARGV[3] ~= '{}' and redis.call('EXISTS', KEYS[1]) == 1 then
  return 0
end
if tonumber(ARGV[5]) > 0 and not redis.call('SET', KEYS[3], ARGV[6], 'NX', 'PX', ARGV[5]) then
  return {2, redis.call('GET', KEYS[3])}
end
local fields = {}
for name, value in pairs(cjson.decode(ARGV[3])) do
  result_set(fields, name, value)
end
local keep = tonumber(ARGV[4])
result_write(KEYS[1], fields, keep > 0 and keep)
if ARGV[2] == '' then
  redis.call('LPUSH', KEYS[2], ARGV[1])  -- (older than every dead letter of the home)
else
  redis.call('ZADD', KEYS[2], ARGV[2], ARGV[1])
  redis.call('PUBLISH', KEYS[4], KEYS[2] == KEYS[4] and 'ready' or 'delayed')
end
return 1
