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
--   limit:turns:<key>, limit:every:<key>  its rate's turns (lib/limit_turns.lua)
--   limits              HASH: each concurrency key held or waited on -> its limit, as the
--                       last take set it (what hands permits on, what operations read,
--                       and what a purge looks through)
--   limit:waiting       HASH: each queue -> how many of its tasks wait for a permit
-- @include keys
-- @include queue
-- @include limit_turns

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

-- One more (or, with ``by`` -1, one less) of ``queue``'s tasks waits for a permit.
local function limits_count_waiting(base, queue, by)
  local counts = keys_name(base, 'limits_waiting')
  if redis.call('HINCRBY', counts, queue, by) <= 0 then
    redis.call('HDEL', counts, queue)
  end
end

-- A waiting task's entry in the ZSET of the concurrency limit it waits on, or of the
-- turns of a rate it was set aside on.
local function limits_entry(queue, payload)
  return queue .. '\n' .. payload
end

-- Hand the free permits of concurrency key ``key`` to the tasks waiting for one, the
-- first first: each goes back to its queue's ready ZSET holding its permit (its take
-- spends it), behind the tasks of its priority ready now, as if enqueued now: keys take
-- turns (with its old score, a key's next task would go ahead of every other key's
-- ready tasks, and a key with a steady backlog would starve the others). The limit is
-- the one the last take set (the settings may have changed the payload's ``limit``).
local function limits_hand_over(base, key, limit)
  local held, wait = keys_name(base, 'limit_held', key), keys_name(base, 'limit_wait', key)
  limit = tonumber(redis.call('HGET', keys_name(base, 'limits'), key)) or limit
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
    local ready, counter = keys_name(base, 'ready', queue), keys_name(base, 'counter')
    queue_ready(ready, counter, queue_rank(payload), payload)
    count = redis.call('SCARD', held)
  end
  if count == 0 then  -- none holds it, none waits: out of use
    redis.call('HDEL', keys_name(base, 'limits'), key)
  end
end

-- Task ``id`` no longer holds permits (it ended, went back to its queue, or was
-- cancelled): each goes to the first task waiting for it.
local function limits_release(base, limits, id)
  for _, limit in ipairs(limits) do
    if limit[1] == 'c' and redis.call('SREM', keys_name(base, 'limit_held', limit[2]), id) == 1 then
      limits_hand_over(base, limit[2], limit[3])
    end
  end
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
      local held = keys_name(base, 'limit_held', limit[2])
      -- A task handed a permit holds it already; it is counted against this take's
      -- limit all the same (handed on under an older, higher number, it gives it back).
      local holds = redis.call('SISMEMBER', held, id) == 1
      local count = redis.call('SCARD', held) - (holds and 1 or 0)
      unused[limit[2]] = count == 0 and not holds
      if not unused[limit[2]] then  -- in use (unused, it is written when taken)
        redis.call('HSET', keys_name(base, 'limits'), limit[2], limit[3])
      end
      if count >= limit[3] then
        -- What it holds goes back; this key's permit is not handed on here (the next end
        -- of a task holding it is), so that tasks over their own number never pass a
        -- permit round and round.
        redis.call('SREM', held, id)
        limits_release(base, limits, id)
        local wait = keys_name(base, 'limit_wait', limit[2])
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
      local interval = limits_interval(limit)
      local tat = redis.call('GET', keys_name(base, 'limit_tat', limit[2]))
      tat = math.max(tonumber(tat) or 0, now)
      local allowed = tat - interval * limit[5]
      limits_respace(base, limit[2], interval, math.max(allowed, now))
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
    local turns, entry = keys_name(base, 'limit_turns', key), limits_entry(queue, payload)
    local at = math.ceil(refusing[4])
    if not redis.call('ZSCORE', turns, entry) then
      -- The turns are those of the tasks set aside now: a cancelled or purged task's
      -- turn goes back with it.
      local last = redis.call('ZRANGE', turns, -1, -1, 'WITHSCORES')[2]
      at = last and math.max(at, math.ceil(tonumber(last) + interval)) or at
      redis.call('ZADD', turns, at, entry)
      redis.call('PEXPIRE', turns, at - now + 86400000)
      redis.call('PEXPIRE', keys_name(base, 'limit_every', key), at - now + 86400000)
    end
    limits_release(base, limits, id)
    local delayed = keys_name(base, 'delayed', queue)
    redis.call('ZADD', delayed, math.ceil(at), payload)
    if redis.call('ZRANGE', delayed, 0, 0)[1] == payload then
      redis.call('PUBLISH', keys_name(base, 'ready', queue), 'delayed')
    end
    return false, math.ceil(at), 'rate'
  end
  for _, rate in ipairs(rates) do
    local tat = rate[2] + rate[3]
    redis.call('SET', keys_name(base, 'limit_tat', rate[1]), string.format('%.3f', tat),
      'PX', math.ceil(tat - now) + 1000)
    redis.call('ZREM', keys_name(base, 'limit_turns', rate[1]), limits_entry(queue, payload))
  end
  for _, limit in ipairs(limits) do
    if limit[1] == 'c' then
      redis.call('SADD', keys_name(base, 'limit_held', limit[2]), id)
      if unused[limit[2]] then
        redis.call('HSET', keys_name(base, 'limits'), limit[2], limit[3])
      end
    end
  end
  return true
end

-- Out of the ZSET of the concurrency limit it waits on: 1 if the task waited on one.
local function limits_unwait(base, limits, queue, payload)
  for _, limit in ipairs(limits) do
    if limit[1] == 'c' then
      local wait = keys_name(base, 'limit_wait', limit[2])
      if redis.call('ZREM', wait, limits_entry(queue, payload)) == 1 then
        limits_count_waiting(base, queue, -1)
        return 1
      end
    end
  end
  return 0
end

-- Task ``id`` (``payload`` in ``queue``), waiting, is cancelled: its turns on rates go
-- back (with ``shift``, the tasks set aside after it come due one turn sooner; a purge
-- drops many turns at once, and the tasks set aside after the last one left book after
-- it), its permits are handed on.
local function limits_cancel(base, limits, id, queue, payload, shift)
  local entry = limits_entry(queue, payload)
  for _, limit in ipairs(limits) do
    if limit[1] == 'r' then
      local turns = keys_name(base, 'limit_turns', limit[2])
      local turn = shift and redis.call('ZSCORE', turns, entry)
      if turn then
        local every = redis.call('GET', keys_name(base, 'limit_every', limit[2]))
        limits_give_turn(base, turns, entry, tonumber(turn),
          tonumber(every) or limits_interval(limit))
      else
        redis.call('ZREM', turns, entry)
      end
    end
  end
  limits_release(base, limits, id)
end
