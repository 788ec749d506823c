-- Remove chats from a user's chat index, each only if its entry still holds the given
-- version: a newer join of the same chat, on its way, keeps its entry.
-- KEYS: 1) the user's index hash: chat id -> version of their latest join of it
-- ARGV: chat id, version pairs
-- Returns: the number of entries removed
local removed = 0
for i = 1, #ARGV, 2 do
  if redis.call('HGET', KEYS[1], ARGV[i]) == ARGV[i + 1] then
    removed = removed + redis.call('HDEL', KEYS[1], ARGV[i])
  end
end
return removed
