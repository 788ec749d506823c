-- The names of a home's keys, the one place a script derives one: from ``base``, the
-- head of the home's keys (home_key.base cuts it from a key the script was given in
-- KEYS, which declares the home's slot), and the suffix that store/layout.py's builder
-- of the same key adds (tests/test_task_store.py ties each one to its builder). A script
-- takes its keys from KEYS where it can; these are those it knows only once it has read
-- a task (its queue, its limits).
local home_key = {}

-- The head of a home's keys, from one of its keys and that key's name after the head.
function home_key.base(key, tail)
  return string.sub(key, 1, #key - #tail)
end

function home_key.ready(base, queue)
  return base .. 'ready:' .. queue
end

function home_key.delayed(base, queue)
  return base .. 'delayed:' .. queue
end

-- The queue of ``ready``, a ready set of the home ``base``.
function home_key.queue_of(base, ready)
  return string.sub(ready, #base + #'ready:' + 1)
end

function home_key.result(base, task_id)
  return base .. 'result:' .. task_id
end

function home_key.counter(base)
  return base .. 'counter'
end

function home_key.limits(base)
  return base .. 'limits'
end

function home_key.limits_waiting(base)
  return base .. 'limit:waiting'
end

function home_key.limit_held(base, key)
  return base .. 'limit:held:' .. key
end

function home_key.limit_wait(base, key)
  return base .. 'limit:wait:' .. key
end

function home_key.limit_tat(base, key)
  return base .. 'limit:tat:' .. key
end

function home_key.limit_turns(base, key)
  return base .. 'limit:turns:' .. key
end

function home_key.limit_every(base, key)
  return base .. 'limit:every:' .. key
end

function home_key.limit_runs(base, worker)
  return base .. 'limit:runs:' .. worker
end
