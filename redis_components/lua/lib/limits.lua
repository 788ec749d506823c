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
--   limit:turns:<key>   ZSET: the tasks set aside on its rate, "<queue>\n<payload>",
--                       scored by their turns (epoch ms)
--   limit:every:<key>   the interval (ms) the turns are spaced by
--   limits              HASH: each concurrency key held or waited on -> its limit, as the
--                       last take set it (what hands permits on, what operations read,
--                       and what a purge looks through)
--   limit:waiting       HASH: each queue -> how many of its tasks wait for a permit
--   limit:runs:<worker> SET: "<key>\n<member>" for each permit that a run of worker
--                       <worker> holds beyond its task's (limits_hold_run)
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

-- How far apart (ms) a rate's starts are: per / limit, as the tasks' code sees them.
-- A start is counted when its task is taken; its code starts up to LIMITS_JITTER_MS
-- later, so that the starts the code sees never exceed limit + burst in any window of
-- ``per`` (closed, too): the interval is that of limit starts in per + the jitter + 1 ms.
local LIMITS_JITTER_MS = 10
local function limits_interval(limit)
  return (limit[4] + LIMITS_JITTER_MS + 1) / limit[3]
end

-- A waiting task's entry in the ZSET of the concurrency limit it waits on, or of the
-- turns of a rate it was set aside on.
local function limits_entry(queue, payload)
  return queue .. '\n' .. payload
end

-- A task set aside on a rate gives its turn back (``entry`` in ``turns``, at ``turn``):
-- each task whose turn came after it moves one ``interval`` sooner.
local function limits_give_turn(base, turns, entry, turn, interval)
  redis.call('ZREM', turns, entry)
  for _, later in ipairs(redis.call('ZRANGEBYSCORE', turns, '(' .. turn, '+inf')) do
    local at = math.ceil(tonumber(redis.call('ZSCORE', turns, later)) - interval)
    local queue, payload = string.match(later, '^([^\n]*)\n(.*)$')
    redis.call('ZADD', turns, at, later)
    redis.call('ZADD', base .. 'delayed:' .. queue, 'XX', at, payload)
  end
end

-- Hand the free permits of concurrency key ``key`` to the tasks waiting for one, the
-- first first: each goes back to its queue's ready ZSET holding its permit (its take
-- spends it), behind the tasks of its priority ready now, as if enqueued now: keys take
-- turns (with its old score, a key's next task would go ahead of every other key's
-- ready tasks, and a key with a steady backlog would starve the others). The limit is
-- the one the last take set (the settings may have changed the payload's ``limit``).
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
    queue_ready(base .. 'ready:' .. queue, base .. 'counter', queue_rank(payload), payload)
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

-- The tasks set aside on rate ``key`` take turns ``interval`` ms apart; spaced by
-- another interval (a restart changed the rate: TASK_LIMITS), they are spaced again,
-- the first at ``first`` at the latest, and move in their delayed ZSETs to their new
-- turns (a raised rate speeds the queued ones up too).
local function limits_respace(base, key, interval, first)
  local every, turns = base .. 'limit:every:' .. key, base .. 'limit:turns:' .. key
  local spacing = string.format('%.3f', interval)
  local was = redis.call('GET', every)
  if was == spacing then
    return
  end
  redis.call('SET', every, spacing, 'PX', math.max(redis.call('PTTL', turns), 0) + 86400000)
  if not was then
    return
  end
  local booked = redis.call('ZRANGE', turns, 0, -1, 'WITHSCORES')
  local at = nil
  for i = 1, #booked, 2 do
    at = at and at + interval or math.min(tonumber(booked[i + 1]), first)
    local queue, payload = string.match(booked[i], '^([^\n]*)\n(.*)$')
    redis.call('ZADD', turns, math.ceil(at), booked[i])
    redis.call('ZADD', base .. 'delayed:' .. queue, 'XX', math.ceil(at), payload)
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
      local held = base .. 'limit:held:' .. limit[2]
      -- A task handed a permit holds it already; it is counted against this take's
      -- limit all the same (handed on under an older, higher number, it gives it back).
      local holds = redis.call('SISMEMBER', held, id) == 1
      local count = redis.call('SCARD', held) - (holds and 1 or 0)
      unused[limit[2]] = count == 0 and not holds
      if not unused[limit[2]] then  -- in use (unused, it is written when taken)
        redis.call('HSET', base .. 'limits', limit[2], limit[3])
      end
      if count >= limit[3] then
        -- What it holds goes back; this key's permit is not handed on here (the next end
        -- of a task holding it is), so that tasks over their own number never pass a
        -- permit round and round.
        redis.call('SREM', held, id)
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
      local interval = limits_interval(limit)
      local tat = math.max(tonumber(redis.call('GET', base .. 'limit:tat:' .. limit[2]) or 0), now)
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
    local turns, entry = base .. 'limit:turns:' .. key, limits_entry(queue, payload)
    local at = math.ceil(refusing[4])
    if not redis.call('ZSCORE', turns, entry) then
      -- The turns are those of the tasks set aside now: a cancelled or purged task's
      -- turn goes back with it.
      local last = redis.call('ZRANGE', turns, -1, -1, 'WITHSCORES')[2]
      at = last and math.max(at, math.ceil(tonumber(last) + interval)) or at
      redis.call('ZADD', turns, at, entry)
      redis.call('PEXPIRE', turns, at - now + 86400000)
      redis.call('PEXPIRE', base .. 'limit:every:' .. key, at - now + 86400000)
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
    redis.call('ZREM', base .. 'limit:turns:' .. rate[1], limits_entry(queue, payload))
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

-- Task ``id`` (``payload`` in ``queue``), waiting, is cancelled: its turns on rates go
-- back (with ``shift``, the tasks set aside after it come due one turn sooner; a purge
-- drops many turns at once, and the tasks set aside after the last one left book after
-- it), its permits are handed on.
local function limits_cancel(base, limits, id, queue, payload, shift)
  local entry = limits_entry(queue, payload)
  for _, limit in ipairs(limits) do
    if limit[1] == 'r' then
      local turns = base .. 'limit:turns:' .. limit[2]
      local turn = shift and redis.call('ZSCORE', turns, entry)
      if turn then
        local every = redis.call('GET', base .. 'limit:every:' .. limit[2])
        limits_give_turn(base, turns, entry, tonumber(turn),
          tonumber(every) or limits_interval(limit))
      else
        redis.call('ZREM', turns, entry)
      end
    end
  end
  limits_release(base, limits, id)
end

-- A run of task ``id`` in ``worker`` goes on beyond its task's end as recorded (its thread
-- was abandoned at a hard limit or terminated; its worker was taken for dead and its
-- task put back): its concurrency permits stay held, by "<id>@<worker>", until that run
-- really ends (limits_free_run) or its worker's tasks are recovered (limits_free_runs).
local function limits_hold_run(base, limits, id, worker)
  local runs = base .. 'limit:runs:' .. worker
  for _, limit in ipairs(limits) do
    if limit[1] == 'c' then
      local held, member = base .. 'limit:held:' .. limit[2], id .. '@' .. worker
      redis.call('SADD', held, member)
      redis.call('SADD', runs, limit[2] .. '\n' .. member)
      redis.call('HSETNX', base .. 'limits', limit[2], limit[3])
    end
  end
end

-- A run's permit of ``key`` held by ``member`` ("<id>@<worker>") goes to the tasks
-- waiting for it.
local function limits_free_member(base, key, member)
  if redis.call('SREM', base .. 'limit:held:' .. key, member) == 1 then
    limits_hand_over(base, key, 1)
  end
end

-- The run of task ``id`` in ``worker`` has ended: the permits it held (limits_hold_run)
-- go to the tasks waiting for them.
local function limits_free_run(base, limits, id, worker)
  local runs = base .. 'limit:runs:' .. worker
  for _, limit in ipairs(limits) do
    if limit[1] == 'c' then
      local member = id .. '@' .. worker
      if redis.call('SREM', runs, limit[2] .. '\n' .. member) == 1 then
        limits_free_member(base, limit[2], member)
      end
    end
  end
end

-- ``worker`` is gone (its tasks recovered): every permit its runs held is handed on.
local function limits_free_runs(base, worker)
  local runs = base .. 'limit:runs:' .. worker
  for _, entry in ipairs(redis.call('SMEMBERS', runs)) do
    local key, member = string.match(entry, '^(.*)\n([^\n]*)$')
    limits_free_member(base, key, member)
  end
  redis.call('DEL', runs)
end
