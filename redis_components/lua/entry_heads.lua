-- KEYS: 1) a ZSET or a LIST of entries (task payloads, dead letters)
-- ARGV: 1) the first index  2) the last index (negative ones count from the end, as in
--       ZRANGE and LRANGE)  3) the most bytes to return of an entry's start  4) of its end
-- Returns: {the number of entries, then for each entry in the range: its start (the
--          whole entry when it is at most ARGV 3 + ARGV 4 bytes long), its end (""
--          when the start is the whole entry), its length in bytes, its score ("" in a
--          LIST)}
-- A list page needs a glimpse of each entry, not megabytes of arguments: entries are
-- read one at a time and cut here, so neither the script nor the client holds a page of
-- whole entries. (Searching an entry for a field would cost more than copying it.)
local zset = redis.call('TYPE', KEYS[1])['ok'] == 'zset'
local total = zset and redis.call('ZCARD', KEYS[1]) or redis.call('LLEN', KEYS[1])
local first, last = tonumber(ARGV[1]), tonumber(ARGV[2])
local start_bytes, end_bytes = tonumber(ARGV[3]), tonumber(ARGV[4])
if first < 0 then first = math.max(total + first, 0) end
if last < 0 then last = total + last end
last = math.min(last, total - 1)
local reply = {total}
for i = first, last do
  local entry, score = nil, ''
  if zset then
    local found = redis.call('ZRANGE', KEYS[1], i, i, 'WITHSCORES')
    entry, score = found[1], found[2]
  else
    entry = redis.call('LINDEX', KEYS[1], i)
  end
  if #entry <= start_bytes + end_bytes then
    reply[#reply + 1] = entry
    reply[#reply + 1] = ''
  else
    reply[#reply + 1] = string.sub(entry, 1, start_bytes)
    reply[#reply + 1] = end_bytes > 0 and string.sub(entry, -end_bytes) or ''
  end
  reply[#reply + 1] = #entry
  reply[#reply + 1] = score
end
return reply
