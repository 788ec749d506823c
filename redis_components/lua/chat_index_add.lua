-- Record in a user's chat index that they are joining a chat, under a new version.
-- The index is written before the chat itself, so that every member of a chat finds
-- it in their index; the version lets the chat ignore a join that lost a race.
-- KEYS: 1) the user's index hash: chat id -> version of their latest join of it
--       2) the user's version counter
-- ARGV: 1) the chat id
-- Returns: the new version. The index's name is also a channel: "joined" is published
--          on it, so a waiting fetch subscribes to the new chat.
local version = redis.call('INCR', KEYS[2])
redis.call('HSET', KEYS[1], ARGV[1], version)
redis.call('PUBLISH', KEYS[1], 'joined')
return version
