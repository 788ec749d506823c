-- Every operation on one group chat, in one script so that they share the membership
-- checks and the retention rules. All four keys carry the chat's hash tag.
-- KEYS: 1) meta hash: last_id (the message id counter), public ("1" or "0"),
--          from:<user> (the last id before they joined an existing chat), own:<user>
--          (present while some of the user's own messages are after their place)
--       2) members zset: member -> id of the last message they have seen
--       3) joins hash: user -> version of their latest join applied here (kept after
--          they leave, so a stale index entry can be told from a join on its way)
--       4) messages zset: message JSON -> message id; its name is also the channel on
--          which the id of every new message is published
-- ARGV: 1) operation: create, send, fetch, since, unread, summary, history, join or leave
--       2) the acting user  3) CHAT_MAX_MESSAGES  4) CHAT_MAX_AGE in seconds (0: none)
--       5) "1": keep messages read by every member (only the limits drop them); "0":
--          delete them (the book's way)
--       6...) the operation's own arguments, listed at each operation below
-- Returns: {status, ...}: status 0 done, 1 no such chat, 2 the user is not a member
--          (then also the version of their last join here, 0 if none), 3 the chat
--          exists already (create); after status 0, what the operation returns

local meta, members, joins, messages = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local operation, user = ARGV[1], ARGV[2]
local max_messages, max_age = tonumber(ARGV[3]), tonumber(ARGV[4])
local keep_read = ARGV[5] == '1'
local DONE, NO_CHAT, NOT_MEMBER, EXISTS = 0, 1, 2, 3

-- Server time in seconds, to the millisecond: every message's "ts".
local function now()
  local time = redis.call('TIME')
  return tonumber(time[1]) + math.floor(tonumber(time[2]) / 1000) / 1000
end

local function last_id()
  return tonumber(redis.call('HGET', meta, 'last_id')) or 0
end

-- Messages every member has seen are no longer needed by anyone (unless kept as history).
local function drop_seen_by_all()
  if keep_read then
    return
  end
  local lowest = redis.call('ZRANGE', members, 0, 0, 'WITHSCORES')[2]
  if lowest then
    redis.call('ZREMRANGEBYSCORE', messages, '-inf', lowest)
  end
end

-- The retention limits drop the oldest messages, read or not, so that a member who
-- never reads cannot make the chat grow without bound. Removal is always from the
-- oldest end, so the messages held are always the ids after some id up to last_id.
local function apply_limits()
  redis.call('ZREMRANGEBYRANK', messages, 0, -max_messages - 1)
  if max_age > 0 then
    local cutoff = now() - max_age
    while true do
      local oldest = redis.call('ZRANGE', messages, 0, 0)[1]
      if not oldest or cjson.decode(oldest).ts >= cutoff then
        break
      end
      redis.call('ZREMRANGEBYRANK', messages, 0, 0)
    end
  end
end

-- A member has seen their own messages from the moment they send them. Their place
-- moves to the message when they had seen everything before it; otherwise it stays
-- (moving it would mark the others' messages before it seen as well) and own:<user>
-- tells the reads below to leave the user's own messages after it out.
local function add_message(text)
  local id = redis.call('HINCRBY', meta, 'last_id', 1)
  local message = cjson.encode({id = id, ts = now(), sender = user, message = text})
  redis.call('ZADD', messages, id, message)
  redis.call('PUBLISH', messages, id)
  apply_limits()
  if tonumber(redis.call('ZSCORE', members, user)) == id - 1 then
    redis.call('ZADD', members, id, user)
    drop_seen_by_all()
  else
    redis.call('HSET', meta, 'own:' .. user, 1)
  end
  return id
end

-- The messages after the user's place (seen) that they have not seen: all of them but
-- their own; and how many messages are held after it, theirs included.
local function unread_after(seen)
  local held = redis.call('ZRANGEBYSCORE', messages, '(' .. seen, '+inf')
  if redis.call('HEXISTS', meta, 'own:' .. user) == 0 then
    return held, #held
  end
  local unread = {}
  for _, message in ipairs(held) do
    if cjson.decode(message).sender ~= user then
      unread[#unread + 1] = message
    end
  end
  return unread, #held
end

-- How many messages after the user's place they have not seen (as unread_after, faster).
local function count_unread(seen)
  if redis.call('HEXISTS', meta, 'own:' .. user) == 0 then
    return redis.call('ZCOUNT', messages, '(' .. seen, '+inf')
  end
  return #unread_after(seen)
end

if operation == 'create' then
  -- ARGV: 6) "1" if anyone may join, else "0"  7) the first message
  --       8...) member, join version pairs (the sender among them)
  -- Returns: the first message's id
  if redis.call('EXISTS', meta) == 1 then
    return {EXISTS}
  end
  redis.call('HSET', meta, 'last_id', 0, 'public', ARGV[6])
  for i = 8, #ARGV, 2 do
    redis.call('ZADD', members, 0, ARGV[i])
    redis.call('HSET', joins, ARGV[i], ARGV[i + 1])
  end
  return {DONE, add_message(ARGV[7])}
end

if redis.call('EXISTS', meta) == 0 then
  return {NO_CHAT}
end

if operation == 'join' then
  -- ARGV: 6) the join's version, from the user's index
  -- A member keeps their place; a newcomer starts after the newest message. A join
  -- older than one already applied here lost the race to it and changes nothing.
  local version = tonumber(ARGV[6])
  if version <= (tonumber(redis.call('HGET', joins, user)) or 0) then
    return {DONE}
  end
  redis.call('HSET', joins, user, version)
  local newest = last_id()
  if redis.call('ZADD', members, 'NX', newest, user) == 1 then
    -- What came before the join is not theirs to read, in history either.
    redis.call('HSET', meta, 'from:' .. user, newest)
  end
  return {DONE}
end

local seen = redis.call('ZSCORE', members, user)
if not seen then
  return {NOT_MEMBER, tonumber(redis.call('HGET', joins, user)) or 0}
end

if operation == 'send' then
  -- ARGV: 6) the message.  Returns: its id
  return {DONE, add_message(ARGV[6])}
end

if operation == 'fetch' then
  -- ARGV: 6) a channel told "read" when this marks something seen (the user's pages
  --          that follow their unread counts)
  -- Returns: how many unread messages the limits dropped (the user's own among them, when
  -- they sent while behind), then the unread messages, oldest first. Everything up to the
  -- newest id counts as seen afterwards.
  apply_limits()
  local unread, held = unread_after(seen)
  local newest = last_id()
  if newest > tonumber(seen) then
    redis.call('ZADD', members, newest, user)
    redis.call('HDEL', meta, 'own:' .. user)
    drop_seen_by_all()
    redis.call('PUBLISH', ARGV[6], 'read')
  end
  return {DONE, newest - tonumber(seen) - held, unread}
end

if operation == 'since' then
  -- ARGV: 6) only ids above this one  7) at most this many
  -- Returns: the messages held after that id (and after the user's join), oldest first;
  -- marks nothing seen
  apply_limits()
  local from = math.max(tonumber(ARGV[6]), tonumber(redis.call('HGET', meta, 'from:' .. user) or 0))
  return {DONE, redis.call('ZRANGEBYSCORE', messages, '(' .. from, '+inf', 'LIMIT', 0, ARGV[7])}
end

if operation == 'unread' then
  -- Returns: how many unread messages a fetch would return now
  apply_limits()
  return {DONE, count_unread(seen)}
end

if operation == 'summary' then
  -- Returns: how many unread messages a fetch would return now, and the members
  apply_limits()
  return {DONE, count_unread(seen), redis.call('ZRANGE', members, 0, -1)}
end

if operation == 'history' then
  -- ARGV: 6) only ids below this one ("+inf": from the newest)  7) at most this many
  -- Returns: the messages held, newest first
  apply_limits()
  local from = redis.call('HGET', meta, 'from:' .. user) or '-inf'
  return {DONE, redis.call('ZREVRANGEBYSCORE', messages, '(' .. ARGV[6], '(' .. from,
    'LIMIT', 0, ARGV[7])}
end

if operation == 'leave' then
  -- Returns: the version of the join that made the user a member. The last member to
  -- leave deletes the chat.
  local version = tonumber(redis.call('HGET', joins, user)) or 0
  redis.call('ZREM', members, user)
  redis.call('HDEL', meta, 'from:' .. user, 'own:' .. user)
  if redis.call('ZCARD', members) == 0 then
    redis.call('DEL', meta, members, joins, messages)
  else
    drop_seen_by_all()
  end
  return {DONE, version}
end

return redis.error_reply('unknown chat operation ' .. tostring(operation))
