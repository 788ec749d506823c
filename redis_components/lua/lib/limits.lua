-- Rate and concurrency limits (see tasks/limits.py), shared by the scripts that take,
-- record, put back, recover and cancel tasks. A limited task's payload starts
-- '{"id":"<hex>","priority":<int>,"limits":[...],' where each limit is ["c", key, limit]
-- or ["r", key, limit, per ms, burst] (no string holds a bracket: limits.to_json). Its
-- keys are the task system's, named from ``base`` (the head of the keys of the queue's
-- home, so on a cluster they share its slot; see tasks/store/__init__.py):
--   limit:held:<key>    SET: the ids of the tasks holding one of its permits
--   limit:wait:<key>    ZSET: the tasks waiting for a permit, "<queue>\n<payload>",
--                       scored as they were in their queue
--   limit:tat:<key>     its rate's theoretical arrival time (GCRA, epoch ms)
--   limit:next:<key>    the turn of the next task set aside on its rate (epoch ms)
--   limit:booked:<key>  HASH: task id -> its turn, for the tasks set aside on its rate
--   limits              HASH: each concurrency key held or waited on -> its limit, as the
--                       last take set it (what hands permits on, what operations read,
--                       and what a purge looks through)
--   limit:waiting       HASH: each queue -> how many of its tasks wait for a permit
-- @include queue

local LIMITS_HEAD = '^{"id":"%x+","priority":%-?%d+,"limits":(%b[])'

local function limits_number(value, least)
  return type(value) == 'number' and value >= least
end

-- The limits of a payload, or nil (also for limits this version cannot read: the task
-- is then taken as any other, and the worker finds what is wrong with it).
local function limits_of(payload)
  local found = string.match(payload, LIMITS_HEAD)
  if not found then  -- most tasks: one match, nothing decoded
    return nil
  end
  local ok, limits = pcall(cjson.decode, found)
  if not (ok and type(limits) == 'table') then
    return nil
  end
  for _, limit in ipairs(limits) do
    local kind = type(limit) == 'table' and type(limit[2]) == 'string' and limit[1]
    if not ((kind == 'c' and limits_number(limit[3], 1))
        or (kind == 'r' and limits_number(limit[3], 1) and limits_number(limit[4], 1)
          and limits_number(limit[5], 0))) then
      return nil
    end
  end
  return limits
end

-- The head of a home's keys, from a key of that home and its name after that head.
local function limits_base(key, tail)
  return string.sub(key, 1, #key - #tail)
end

-- The limits set in the settings (TASK_LIMITS), as the worker passes them to its takes:
-- a JSON list of limits as in a payload, whose key ends in '*' where it is a prefix, the
-- exact keys first, then the longest prefixes (tasks/limits.py), or ''. nil for none.
local function limits_settings(text)
  if text == '' then
    return nil
  end
  local set = cjson.decode(text)
  for _, limit in ipairs(set) do
    limit.prefix = string.match(limit[2], '^(.*)%*$')
  end
  return set
end

-- Each of ``limits`` (a payload's) that the settings ``set`` name takes the settings'
-- numbers (the first match: an exact key, else the longest prefix), and is marked.
local function limits_set(limits, set)
  for _, limit in ipairs(limits) do
    for _, setting in ipairs(set) do
      local prefix = setting.prefix
      if setting[1] == limit[1] and (setting[2] == limit[2]
          or (prefix and string.sub(limit[2], 1, #prefix) == prefix)) then
        limit[3], limit[4], limit[5], limit.set = setting[3], setting[4], setting[5], true
        break
      end
    end
  end
end

-- One more (or, with ``by`` -1, one less) of ``queue``'s tasks waits for a permit.
local function limits_count_waiting(base, queue, by)
  local counts = base .. 'limit:waiting'
  if redis.call('HINCRBY', counts, queue, by) <= 0 then
    redis.call('HDEL', counts, queue)
  end
end

-- Hand the free permits of concurrency key ``key`` to the tasks waiting for one, the
-- first first: each goes back to its queue's ready ZSET with its score, holding its
-- permit (its take spends it). The limit is the one the last take set (the settings
-- may have changed the payload's ``limit``).
local function limits_hand_over(base, key, limit)
  local held, wait = base .. 'limit:held:' .. key, base .. 'limit:wait:' .. key
  limit = tonumber(redis.call('HGET', base .. 'limits', key)) or limit
  local count = redis.call('SCARD', held)
  while count < limit do
    local first = redis.call('ZPOPMIN', wait)
    if not first[1] then
      break
    end
    local queue, payload = string.match(first[1], '^([^\n]*)\n(.*)$')
    local id = queue_id(payload)
    if id then
      redis.call('SADD', held, id)
    end
    limits_count_waiting(base, queue, -1)
    local ready = base .. 'ready:' .. queue
    redis.call('ZADD', ready, first[2], payload)
    if redis.call('ZCARD', ready) == 1 then
      redis.call('PUBLISH', ready, 'ready')
    end
    count = redis.call('SCARD', held)
  end
  if count == 0 then  -- none holds it, none waits: out of use
    redis.call('HDEL', base .. 'limits', key)
  end
end

-- Task ``id`` no longer holds permits (it ended, went back to its queue, or was
-- cancelled): each goes to the first task waiting for it.
local function limits_release(base, limits, id)
  for _, limit in ipairs(limits) do
    if limit[1] == 'c' and redis.call('SREM', base .. 'limit:held:' .. limit[2], id) == 1 then
      limits_hand_over(base, limit[2], limit[3])
    end
  end
end

-- A waiting task's entry in the ZSET of the concurrency limit it waits on.
local function limits_entry(queue, payload)
  return queue .. '\n' .. payload
end

-- Take task ``id`` (just popped from ``queue``'s ready ZSET with ``score``) under its
-- limits at ``now``: true, with its permits taken and its rates spent, if every limit
-- lets it start. If one does not, it is not taken, and the permits it held are handed
-- on: over a concurrency limit, it waits in that limit's ZSET until a permit is handed
-- to it; over a rate, it waits in its queue's delayed ZSET for its turn. Returns false,
-- that start (epoch ms) or nil, and which kind of limit set it aside: 'concurrency' or
-- 'rate'. Each concurrency limit is written to the index at each take, so that the
-- scripts handing its permits on follow the number the last take applied (the
-- settings may change it: limits_set).
local function limits_take(base, limits, id, queue, score, payload, now)
  local unused = {}  -- the concurrency limits no task holds
  for _, limit in ipairs(limits) do
    if limit[1] == 'c' then
      local held = base .. 'limit:held:' .. limit[2]
      local count = redis.call('SISMEMBER', held, id) == 0 and redis.call('SCARD', held)
      unused[limit[2]] = count == 0
      if count ~= 0 then  -- in use (unused, it is written when taken)
        redis.call('HSET', base .. 'limits', limit[2], limit[3])
      end
      if count and count >= limit[3] then
        limits_release(base, limits, id)
        local wait = base .. 'limit:wait:' .. limit[2]
        if redis.call('ZADD', wait, score, limits_entry(queue, payload)) == 1 then
          limits_count_waiting(base, queue, 1)
        end
        return false, nil, 'concurrency'
      end
    end
  end
  -- Each rate: the earliest start GCRA allows it now (exact: a start is counted when
  -- it is taken, never before). The one allowing it latest sets it aside.
  local rates, refusing = {}, nil
  for _, limit in ipairs(limits) do
    if limit[1] == 'r' then
      local interval = limit[4] / limit[3]
      local tat = math.max(tonumber(redis.call('GET', base .. 'limit:tat:' .. limit[2]) or 0), now)
      local allowed = tat - interval * limit[5]
      rates[#rates + 1] = {limit[2], tat, interval, allowed}
      if allowed > now and (not refusing or allowed > refusing[4]) then
        refusing = rates[#rates]
      end
    end
  end
  if refusing then
    -- A task set aside on a rate for the first time gets its turn: the rate's next free
    -- start after those of the tasks set aside before it, so that they come due one
    -- per interval, in order, never all at once. One whose turn came and that is still
    -- too early (another start came first) waits only until the rate allows it.
    local key, interval = refusing[1], refusing[3]
    local turns = base .. 'limit:booked:' .. key
    local at = math.ceil(refusing[4])
    if redis.call('HEXISTS', turns, id) == 0 then
      local last = base .. 'limit:next:' .. key
      at = math.max(at, tonumber(redis.call('GET', last) or 0))
      redis.call('SET', last, at + interval, 'PX', math.ceil(at + interval - now) + 1000)
      redis.call('HSET', turns, id, at)
      redis.call('PEXPIRE', turns, at - now + 86400000)
    end
    limits_release(base, limits, id)
    local delayed = base .. 'delayed:' .. queue
    redis.call('ZADD', delayed, math.ceil(at), payload)
    if redis.call('ZRANGE', delayed, 0, 0)[1] == payload then
      redis.call('PUBLISH', base .. 'ready:' .. queue, 'delayed')
    end
    return false, math.ceil(at), 'rate'
  end
  for _, rate in ipairs(rates) do
    local tat = rate[2] + rate[3]
    redis.call('SET', base .. 'limit:tat:' .. rate[1], string.format('%.3f', tat),
      'PX', math.ceil(tat - now) + 1000)
    redis.call('HDEL', base .. 'limit:booked:' .. rate[1], id)
  end
  for _, limit in ipairs(limits) do
    if limit[1] == 'c' then
      redis.call('SADD', base .. 'limit:held:' .. limit[2], id)
      if unused[limit[2]] then
        redis.call('HSET', base .. 'limits', limit[2], limit[3])
      end
    end
  end
  return true
end

-- Out of the ZSET of the concurrency limit it waits on: 1 if the task waited on one.
local function limits_unwait(base, limits, queue, payload)
  for _, limit in ipairs(limits) do
    if limit[1] == 'c' then
      local wait = base .. 'limit:wait:' .. limit[2]
      if redis.call('ZREM', wait, limits_entry(queue, payload)) == 1 then
        limits_count_waiting(base, queue, -1)
        return 1
      end
    end
  end
  return 0
end

-- Task ``id``, waiting, is cancelled: its bookings are dropped, its permits handed on.
local function limits_cancel(base, limits, id)
  for _, limit in ipairs(limits) do
    if limit[1] == 'r' then
      redis.call('HDEL', base .. 'limit:booked:' .. limit[2], id)
    end
  end
  limits_release(base, limits, id)
end
