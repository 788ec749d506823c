-- Rename users in one group chat (manage.py rc_migrate_users: 0.1 named them by
-- username, later versions by primary key): their member entry, with the place they
-- had reached, where their history starts and whether some of their own messages are
-- after that place (own:, see chat.lua); their joins entry; the sender of every
-- message they sent. All in one script, so the chat is never seen half renamed; doing
-- it again changes nothing, as the old names are gone.
-- KEYS: 1) meta hash  2) members zset  3) joins hash  4) messages zset (the chat's keys,
--       as in chat.lua; they share the chat's hash tag)
-- ARGV: old name, new name, version triples: a user's old name, their new one (their
--       pk), and the version of the entry just made for this chat in the new name's
--       chat index (chat_index_add), recorded as their join here if they are a member
-- Returns: {members, senders}: members, for each triple 1 if the new name is a member
--          of the chat afterwards, else 0 (the caller then removes the index entry it
--          made); senders, how many messages had their sender renamed

local meta, members, joins, messages = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local renamed = {}
local result = {}

for i = 1, #ARGV, 3 do
  local old, new, version = ARGV[i], ARGV[i + 1], tonumber(ARGV[i + 2])
  renamed[old] = new
  local old_seen = redis.call('ZSCORE', members, old)
  local new_seen = redis.call('ZSCORE', members, new)
  if old_seen then
    local old_from = redis.call('HGET', meta, 'from:' .. old)
    local new_from = redis.call('HGET', meta, 'from:' .. new)
    local seen, from = tonumber(old_seen), old_from
    if new_seen then
      -- A member under both names: the furthest place read, the earliest history.
      seen = math.max(seen, tonumber(new_seen))
      if old_from and new_from then
        from = tostring(math.min(tonumber(old_from), tonumber(new_from)))
      else
        from = false
      end
    end
    redis.call('ZREM', members, old)
    redis.call('ZADD', members, seen, new)
    redis.call('HDEL', meta, 'from:' .. old)
    if redis.call('HDEL', meta, 'own:' .. old) == 1 then
      redis.call('HSET', meta, 'own:' .. new, 1)
    end
    if from then
      redis.call('HSET', meta, 'from:' .. new, from)
    else
      redis.call('HDEL', meta, 'from:' .. new)
    end
  end
  -- The old name's join versions came from its own counter, which is not carried over.
  -- The new name's index entry is applied as a join is (a member's, or, should the
  -- caller not take back a non-member's, one that the usual clean-up removes as stale).
  redis.call('HDEL', joins, old)
  if version > (tonumber(redis.call('HGET', joins, new)) or 0) then
    redis.call('HSET', joins, new, version)
  end
  result[#result + 1] = (old_seen or new_seen) and 1 or 0
end

local senders = 0
local held = redis.call('ZRANGE', messages, 0, -1, 'WITHSCORES')
for i = 1, #held, 2 do
  local ok, message = pcall(cjson.decode, held[i])
  if ok and type(message) == 'table' and renamed[message.sender] then
    message.sender = renamed[message.sender]
    redis.call('ZREM', messages, held[i])
    redis.call('ZADD', messages, held[i + 1], cjson.encode(message))
    senders = senders + 1
  end
end

return {result, senders}
