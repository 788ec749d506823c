-- Every change to one file channel (files.py), in one script so that each is atomic
-- and the limit on the bytes held is kept by Redis itself. All keys carry the
-- channel's hash tag.
-- KEYS: 1) meta hash: sender (its token), sender_seen (server ms), state ("sending" or
--          "done"), limit, used (bytes reserved or held), last_seq (the newest
--          announced file), copying and copying_size (the file being copied),
--          stalled_after (ms), chat (the chat id)
--       2) readers zset: each active reader -> seq of the last file it finished
--       3) seen hash: each active reader -> when it was last heard from (server ms)
--       4) files hash: seq -> JSON {"name", "size", "gzip"} of each announced file held
--       5) gone hash: reader -> "finished" or "dropped"
--       6) freed list: a token is pushed whenever bytes are freed (the sender waits on it)
--       7...) the data keys of the files the operation names (see each one)
-- ARGV: 1) operation: open, chat, reserve, append, announce, finish, status, drop,
--          release (the sender's), hello, ack, bye (a reader's)
--       2) the sender's token or the reader's id  3...) the operation's own arguments
-- Returns: {status, ...}: status 0 done, 1 no such channel, 2 another sender holds the
--          channel, 3 no room yet (reserve), 4 not a reader of the channel, 5 the
--          reader was dropped, 6 the reader has finished, 7 the channel is complete
--          and deleted, 8 the channel is finishing (open), 9 other readers (open)

local meta, readers, seen, files, gone, freed = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6]
local operation, actor = ARGV[1], ARGV[2]
local OK, NO_CHANNEL, BUSY, NO_ROOM, NOT_A_READER, DROPPED, FINISHED, COMPLETE, FINISHING,
  OTHER_READERS = 0, 1, 2, 3, 4, 5, 6, 7, 8, 9
-- How long the freed list outlives a sender that stopped waiting on it.
local FREED_TTL_MS = 60000

local time = redis.call('TIME')
local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)

local function field(name)
  return redis.call('HGET', meta, name)
end

local function number(name)
  return tonumber(field(name)) or 0
end

local function wake_sender()
  redis.call('LPUSH', freed, 1)
  redis.call('LTRIM', freed, 0, 0)
  redis.call('PEXPIRE', freed, FREED_TTL_MS)
end

-- The seq every active reader has finished (all of them, when none is left).
local function finished_by_all()
  local lowest = redis.call('ZRANGE', readers, 0, 0, 'WITHSCORES')[2]
  return lowest and tonumber(lowest) or math.huge
end

-- Delete the files among KEYS[7...] (seqs first, first + 1, ...) that every active
-- reader has finished, and give their bytes back.
local function free(first)
  local upto, given = finished_by_all(), 0
  for i = 7, #KEYS do
    local seq = first + i - 7
    if seq > upto then
      break
    end
    local info = redis.call('HGET', files, seq)
    if info then
      given = given + cjson.decode(info).size
      redis.call('HDEL', files, seq)
      redis.call('DEL', KEYS[i])
    end
  end
  if given > 0 then
    redis.call('HINCRBY', meta, 'used', -given)
    wake_sender()
  end
end

-- Once the sender is done and no active reader is left, nothing is held any more.
local function complete_if_done()
  if field('state') == 'done' and redis.call('ZCARD', readers) == 0 then
    redis.call('DEL', meta, readers, seen, files, gone)
    wake_sender()
    return true
  end
  return false
end

-- Active readers the sender waits for that have been silent for stalled_after:
-- {reader, ms silent, files left, ...}.
local function stalled()
  local found, last_seq, done = {}, number('last_seq'), field('state') == 'done'
  local limit = number('stalled_after')
  local entries = redis.call('ZRANGE', readers, 0, -1, 'WITHSCORES')
  for i = 1, #entries, 2 do
    local reader, finished = entries[i], tonumber(entries[i + 1])
    local silent = now - (tonumber(redis.call('HGET', seen, reader)) or 0)
    if (done or finished < last_seq) and silent >= limit then
      table.insert(found, reader)
      table.insert(found, silent)
      table.insert(found, last_seq - finished)
    end
  end
  return found
end

if redis.call('EXISTS', meta) == 0 then
  if operation ~= 'open' then
    return {NO_CHANNEL}
  end
  -- ARGV: 3) limit  4) stalled_after ms  5...) reader ids
  redis.call('HSET', meta, 'sender', actor, 'sender_seen', now, 'state', 'sending',
    'limit', ARGV[3], 'used', 0, 'last_seq', 0, 'stalled_after', ARGV[4])
  for i = 5, #ARGV do
    redis.call('ZADD', readers, 0, ARGV[i])
    redis.call('HSET', seen, ARGV[i], now)
  end
  -- Returns: {OK, 0 (a new channel), last_seq, chat id}
  return {OK, 0, 0, ''}
end

if operation == 'open' then
  -- Continue a channel whose sender stopped or went silent, with the same readers.
  -- Returns: {OK, 1, last_seq, chat id}, or BUSY with the ms since the sender was seen
  if field('state') == 'done' then
    return {FINISHING}
  end
  local sender, silent = field('sender'), now - number('sender_seen')
  if sender and sender ~= actor and silent < number('stalled_after') then
    return {BUSY, silent}
  end
  local known = redis.call('ZCARD', readers) + redis.call('HLEN', gone)
  local same = known == #ARGV - 4
  for i = 5, #ARGV do
    same = same and (redis.call('ZSCORE', readers, ARGV[i]) or redis.call('HEXISTS', gone, ARGV[i]) == 1)
  end
  if not same then
    local names = redis.call('ZRANGE', readers, 0, -1)
    for _, name in ipairs(redis.call('HKEYS', gone)) do
      table.insert(names, name)
    end
    return {OTHER_READERS, names}
  end
  redis.call('HSET', meta, 'sender', actor, 'sender_seen', now, 'limit', ARGV[3],
    'stalled_after', ARGV[4])
  return {OK, 1, number('last_seq'), field('chat') or ''}
end

-- The reader's operations.

if operation == 'hello' or operation == 'ack' or operation == 'bye' then
  local reader = actor
  local finished = redis.call('ZSCORE', readers, reader)
  if not finished then
    local how = redis.call('HGET', gone, reader)
    if how == 'dropped' then
      return {DROPPED}
    elseif how == 'finished' then
      return {FINISHED}
    end
    local names = redis.call('ZRANGE', readers, 0, -1)
    for _, name in ipairs(redis.call('HKEYS', gone)) do
      table.insert(names, name)
    end
    return {NOT_A_READER, names}
  end
  finished = tonumber(finished)
  local last_seq = number('last_seq')
  redis.call('HSET', seen, reader, now)

  if operation == 'hello' then
    -- Also the reader's heartbeat.
    -- Returns: {OK, seq of the last file it finished, last_seq, state, chat id,
    --          stalled_after ms}
    return {OK, finished, last_seq, field('state'), field('chat') or '', number('stalled_after')}
  end

  if operation == 'ack' then
    -- ARGV: 3) the seq of the file the reader finished; KEYS[7]: that file's data key.
    -- Files are finished in order; acknowledging one twice changes nothing.
    local seq = tonumber(ARGV[3])
    if seq <= finished then
      return {OK}
    end
    if seq ~= finished + 1 or seq > last_seq then
      return redis.error_reply('reader ' .. reader .. ' cannot finish file ' .. seq ..
        ' after file ' .. finished .. ' (files up to ' .. last_seq .. ' announced)')
    end
    redis.call('ZADD', readers, seq, reader)
    free(seq)
    return {OK}
  end

  -- bye: the reader has finished every file of a channel whose sender is done.
  if field('state') ~= 'done' or finished < last_seq then
    return redis.error_reply('reader ' .. reader .. ' has not finished the channel')
  end
  redis.call('ZREM', readers, reader)
  redis.call('HDEL', seen, reader)
  redis.call('HSET', gone, reader, 'finished')
  return {complete_if_done() and COMPLETE or OK}
end

-- The sender's operations: only the sender holding the channel may run them.

if field('sender') ~= actor then
  return {BUSY, now - number('sender_seen')}
end
redis.call('HSET', meta, 'sender_seen', now)

if operation == 'chat' then
  -- ARGV: 3) the chat id of the channel's announcements
  redis.call('HSET', meta, 'chat', ARGV[3])
  return {OK}
end

if operation == 'reserve' then
  -- ARGV: 3) the next file's seq  4) its size. KEYS[7]: its data key.
  -- A partial copy left by a sender that stopped (or by this one, retrying) is deleted
  -- first. Returns: {OK, bytes used} or {NO_ROOM, bytes used}
  local seq, size = tonumber(ARGV[3]), tonumber(ARGV[4])
  if seq ~= number('last_seq') + 1 then
    return redis.error_reply('the next file is ' .. (number('last_seq') + 1) .. ', not ' .. seq)
  end
  if field('copying') then
    redis.call('DEL', KEYS[7])
    redis.call('HINCRBY', meta, 'used', -number('copying_size'))
    redis.call('HDEL', meta, 'copying', 'copying_size')
  end
  local used = number('used')
  if used + size > number('limit') then
    return {NO_ROOM, used}
  end
  redis.call('HSET', meta, 'used', used + size, 'copying', seq, 'copying_size', size)
  return {OK, used + size}
end

if operation == 'append' then
  -- ARGV: 3) seq  4) the offset of the block  5) the block. KEYS[7]: the file's data key.
  -- Appending the same block again (a retry after a lost reply) changes nothing.
  local seq, offset, block = tonumber(ARGV[3]), tonumber(ARGV[4]), ARGV[5]
  if number('copying') ~= seq then
    return redis.error_reply('file ' .. seq .. ' is not being copied')
  end
  local length = redis.call('STRLEN', KEYS[7])
  if length == offset + #block then
    return {OK}
  end
  if length ~= offset then
    return redis.error_reply('file ' .. seq .. ' holds ' .. length .. ' bytes, not ' .. offset)
  end
  if offset + #block > number('copying_size') then
    return redis.error_reply('file ' .. seq .. ' would exceed the ' .. number('copying_size') ..
      ' bytes reserved for it')
  end
  redis.call('APPEND', KEYS[7], block)
  return {OK}
end

if operation == 'announce' then
  -- ARGV: 3) seq  4) the file's JSON info  5) its size as copied. KEYS[7]: its data key.
  -- Returns: {OK, bytes used}
  local seq, size = tonumber(ARGV[3]), tonumber(ARGV[5])
  if seq <= number('last_seq') then
    return {OK, number('used')}
  end
  if number('copying') ~= seq then
    return redis.error_reply('file ' .. seq .. ' is not being copied')
  end
  redis.call('HINCRBY', meta, 'used', size - number('copying_size'))
  redis.call('HDEL', meta, 'copying', 'copying_size')
  redis.call('HSET', meta, 'last_seq', seq)
  redis.call('HSET', files, seq, ARGV[4])
  free(seq)  -- at once, if no reader is left
  return {OK, number('used')}
end

if operation == 'finish' then
  -- Every file is announced. Returns: {OK} or {COMPLETE}
  redis.call('HSET', meta, 'state', 'done')
  return {complete_if_done() and COMPLETE or OK}
end

if operation == 'status' then
  -- Returns: {OK, bytes used, last_seq, the seq every active reader has finished,
  --          {stalled reader, ms silent, files left, ...}}
  local last_seq = number('last_seq')
  return {OK, number('used'), last_seq, math.min(finished_by_all(), last_seq), stalled()}
end

if operation == 'drop' then
  -- Go on without readers that are still stalled. ARGV: 3) the seq of KEYS[7]
  -- 4...) reader ids. KEYS[7...]: the data keys of every file that may be held.
  -- Returns: {OK or COMPLETE, {the readers dropped}}
  local still = {}
  local entries = stalled()
  for i = 1, #entries, 3 do
    still[entries[i]] = true
  end
  local dropped = {}
  for i = 4, #ARGV do
    if still[ARGV[i]] then
      redis.call('ZREM', readers, ARGV[i])
      redis.call('HDEL', seen, ARGV[i])
      redis.call('HSET', gone, ARGV[i], 'dropped')
      table.insert(dropped, ARGV[i])
    end
  end
  free(tonumber(ARGV[3]))
  return {complete_if_done() and COMPLETE or OK, dropped}
end

if operation == 'release' then
  -- The sender stops before the end; another may continue the channel. KEYS[7]: the
  -- data key of the file it may have been copying, which is deleted.
  if field('copying') then
    redis.call('DEL', KEYS[7])
    redis.call('HINCRBY', meta, 'used', -number('copying_size'))
    redis.call('HDEL', meta, 'copying', 'copying_size')
  end
  redis.call('HDEL', meta, 'sender')
  return {OK}
end

return redis.error_reply('unknown file channel operation ' .. tostring(operation))
