-- Rate and concurrency limits (see tasks/limits.py), shared by the scripts that take,
-- record, put back, recover and cancel tasks. A limited task's payload starts
-- '{"id":"<hex>","priority":<int>,"limits":[...],' where each limit is ["c", key, limit]
-- or ["r", key, limit, per ms, burst] (no string holds a bracket: limits.to_json). Its
-- keys are the task system's, named from ``base`` (the head of every task key, so on a
-- cluster they share the task system's slot):
--   limit:held:<key>    SET: the ids of the tasks holding one of its permits
--   limit:wait:<key>    ZSET: the tasks waiting for a permit, "<queue>\n<payload>",
--                       scored as they were in their queue
--   limit:tat:<key>     its rate's theoretical arrival time (epoch ms)
--   limit:booked:<key>  HASH: task id -> the start it booked (epoch ms)
-- @include queue

local LIMITS_HEAD = '^{"id":"%x+","priority":%-?%d+,"limits":(%b[])'

-- The limits of a payload, or nil.
local function limits_of(payload)
  local found = string.match(payload, LIMITS_HEAD)
  return found and cjson.decode(found)
end

-- The head of every task key, from a key of the task system and its name after that head.
local function limits_base(key, tail)
  return string.sub(key, 1, #key - #tail)
end

-- Hand the free permits of concurrency key ``key`` to the tasks waiting for one, the
-- first first: each goes back to its queue's ready ZSET with its score, holding its
-- permit (its take spends it).
local function limits_hand_over(base, key, limit)
  local held, wait = base .. 'limit:held:' .. key, base .. 'limit:wait:' .. key
  while redis.call('SCARD', held) < limit do
    local first = redis.call('ZPOPMIN', wait)
    if not first[1] then
      return
    end
    local queue, payload = string.match(first[1], '^([^\n]*)\n(.*)$')
    local id = queue_id(payload)
    if id then
      redis.call('SADD', held, id)
    end
    local ready = base .. 'ready:' .. queue
    redis.call('ZADD', ready, first[2], payload)
    if redis.call('ZCARD', ready) == 1 then
      redis.call('PUBLISH', ready, 'ready')
    end
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
-- to it; over a rate, it books the rate's next free start and waits in its queue's
-- delayed ZSET until then. Returns false and that start (epoch ms), or false and nil.
local function limits_take(base, limits, id, queue, score, payload, now)
  for _, limit in ipairs(limits) do
    if limit[1] == 'c' then
      local held = base .. 'limit:held:' .. limit[2]
      if redis.call('SISMEMBER', held, id) == 0 and redis.call('SCARD', held) >= limit[3] then
        limits_release(base, limits, id)
        redis.call('ZADD', base .. 'limit:wait:' .. limit[2], score, limits_entry(queue, payload))
        return false, nil
      end
    end
  end
  -- Each rate: a booking of this task, or the earliest start GCRA allows.
  local rates, book = {}, nil
  for _, limit in ipairs(limits) do
    if limit[1] == 'r' then
      local key = limit[2]
      local booked = redis.call('HEXISTS', base .. 'limit:booked:' .. key, id) == 1
      local interval = limit[4] / limit[3]
      local tat = math.max(tonumber(redis.call('GET', base .. 'limit:tat:' .. key) or 0), now)
      local allowed = tat - interval * limit[5]
      rates[#rates + 1] = {key, booked, tat, interval}
      if not booked and allowed > now and (not book or allowed > book[2]) then
        book = {#rates, allowed}
      end
    end
  end
  local function spend(rate)
    local key, tat = base .. 'limit:tat:' .. rate[1], rate[3] + rate[4]
    redis.call('SET', key, string.format('%.3f', tat), 'PX', math.ceil(tat - now) + 1000)
  end
  if book then
    local rate, at = rates[book[1]], math.ceil(book[2])
    spend(rate)
    local bookings = base .. 'limit:booked:' .. rate[1]
    redis.call('HSET', bookings, id, at)
    redis.call('PEXPIRE', bookings, at - now + 86400000)
    limits_release(base, limits, id)
    local delayed = base .. 'delayed:' .. queue
    redis.call('ZADD', delayed, at, payload)
    if redis.call('ZRANGE', delayed, 0, 0)[1] == payload then
      redis.call('PUBLISH', base .. 'ready:' .. queue, 'delayed')
    end
    return false, at
  end
  for _, rate in ipairs(rates) do
    if rate[2] then
      redis.call('HDEL', base .. 'limit:booked:' .. rate[1], id)
    else
      spend(rate)
    end
  end
  for _, limit in ipairs(limits) do
    if limit[1] == 'c' then
      redis.call('SADD', base .. 'limit:held:' .. limit[2], id)
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
