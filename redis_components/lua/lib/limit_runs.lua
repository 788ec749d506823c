-- The permits of runs that outlive their tasks' records (see lib/limits.lua):
--   limit:runs:<worker> SET: "<key>\n<member>" for each permit that a run of worker
--                       <worker> holds beyond its task's (limits_hold_run)
-- @include keys
-- @include limits

-- A run of task ``id`` in ``worker`` goes on beyond its task's end as recorded (its thread
-- was abandoned at a hard limit or terminated; its worker was taken for dead and its
-- task put back): its concurrency permits stay held, by "<id>@<worker>", until that run
-- really ends (limits_free_run) or its worker's tasks are recovered (limits_free_runs).
local function limits_hold_run(base, limits, id, worker)
  local runs = keys_name(base, 'limit_runs', worker)
  for _, limit in ipairs(limits) do
    if limit[1] == 'c' then
      local held, member = keys_name(base, 'limit_held', limit[2]), id .. '@' .. worker
      redis.call('SADD', held, member)
      redis.call('SADD', runs, limit[2] .. '\n' .. member)
      redis.call('HSETNX', keys_name(base, 'limits'), limit[2], limit[3])
    end
  end
end

-- A run's permit of ``key`` held by ``member`` ("<id>@<worker>") goes to the tasks
-- waiting for it.
local function limits_free_member(base, key, member)
  if redis.call('SREM', keys_name(base, 'limit_held', key), member) == 1 then
    limits_hand_over(base, key, 1)
  end
end

-- The run of task ``id`` in ``worker`` has ended: the permits it held (limits_hold_run)
-- go to the tasks waiting for them.
local function limits_free_run(base, limits, id, worker)
  local runs = keys_name(base, 'limit_runs', worker)
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
  local runs = keys_name(base, 'limit_runs', worker)
  for _, entry in ipairs(redis.call('SMEMBERS', runs)) do
    local key, member = string.match(entry, '^(.*)\n([^\n]*)$')
    limits_free_member(base, key, member)
  end
  redis.call('DEL', runs)
end
