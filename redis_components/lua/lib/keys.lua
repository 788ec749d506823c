-- The names of a home's keys, the one place a script derives one: from ``base``, the
-- head of the home's keys (keys_base cuts it from a key the script was given in KEYS,
-- which declares the home's slot), and the suffix that store/layout.py's builder of the
-- same key adds (tests/test_task_store.py ties each one to its builder). A script takes
-- its keys from KEYS where it can; these are those it knows only once it has read a
-- task (its queue, its limits). Three functions, not one per key: a script makes its
-- functions at each call, and fourteen cost it about 3.5 us (5 % of a take).

-- The head of a home's keys, from one of its keys and that key's name after the head.
local function keys_base(key, tail)
  return string.sub(key, 1, #key - #tail)
end

local KEYS_LIMIT_KINDS = ' held wait tat turns every runs '  -- (a string: no table to make)

-- The key ``kind`` of the home ``base``: 'counter', 'limits', 'totals',
-- 'limits_waiting', or, with ``part`` (a queue, a task id, a limit's key or a worker
-- id), 'ready', 'delayed', 'result' or 'limit_<held|wait|tat|turns|every|runs>'.
local function keys_name(base, kind, part)
  if kind == 'counter' or kind == 'limits' or kind == 'totals' then
    return base .. kind
  elseif kind == 'limits_waiting' then
    return base .. 'limit:waiting'
  elseif kind == 'ready' or kind == 'delayed' or kind == 'result' then
    return base .. kind .. ':' .. part
  end
  local limit = string.match(kind, '^limit_(%l+)$')
  if not (limit and string.find(KEYS_LIMIT_KINDS, ' ' .. limit .. ' ', 1, true)) then
    error('no key is named ' .. tostring(kind))
  end
  return base .. 'limit:' .. limit .. ':' .. part
end

-- The queue of ``ready``, a ready set of the home ``base``.
local function keys_queue_of(base, ready)
  return string.sub(ready, #base + #'ready:' + 1)
end
