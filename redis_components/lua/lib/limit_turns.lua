-- The turns of rates (see lib/limits.lua, which includes this): how far apart a rate's
-- starts are, and the turns of the tasks set aside on it, in
--   limit:turns:<key>   ZSET: the tasks set aside on its rate, "<queue>\n<payload>",
--                       scored by their turns (epoch ms)
--   limit:every:<key>   the interval (ms) the turns are spaced by
-- @include keys

-- How far apart (ms) a rate's starts are: per / limit, as the tasks' code sees them.
-- A start is counted when its task is taken; its code starts up to LIMITS_JITTER_MS
-- later, so that the starts the code sees never exceed limit + burst in any window of
-- ``per`` (closed, too): the interval is that of limit starts in per + the jitter + 1 ms.
local LIMITS_JITTER_MS = 10
local function limits_interval(limit)
  return (limit[4] + LIMITS_JITTER_MS + 1) / limit[3]
end

-- A task set aside on a rate gives its turn back (``entry`` in ``turns``, at ``turn``):
-- each task whose turn came after it moves one ``interval`` sooner.
local function limits_give_turn(base, turns, entry, turn, interval)
  redis.call('ZREM', turns, entry)
  for _, later in ipairs(redis.call('ZRANGEBYSCORE', turns, '(' .. turn, '+inf')) do
    local at = math.ceil(tonumber(redis.call('ZSCORE', turns, later)) - interval)
    local queue, payload = string.match(later, '^([^\n]*)\n(.*)$')
    redis.call('ZADD', turns, at, later)
    redis.call('ZADD', keys_name(base, 'delayed', queue), 'XX', at, payload)
  end
end

-- The tasks set aside on rate ``key`` take turns ``interval`` ms apart; spaced by
-- another interval (a restart changed the rate: TASK_LIMITS), they are spaced again,
-- the first at ``first`` at the latest, and move in their delayed ZSETs to their new
-- turns (a raised rate speeds the queued ones up too).
local function limits_respace(base, key, interval, first)
  local every, turns = keys_name(base, 'limit_every', key), keys_name(base, 'limit_turns', key)
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
    redis.call('ZADD', keys_name(base, 'delayed', queue), 'XX', math.ceil(at), payload)
  end
end
