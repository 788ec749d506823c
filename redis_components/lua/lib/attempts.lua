-- The running tasks' attempts, shared by the scripts that take, record and recover
-- tasks. The HASH of running tasks maps a task id to the attempts of it running now,
-- each "<take ms> <worker id>", joined by '|' (oldest first): one, unless copies of a
-- task run at once (delivered again by hand, or by at-least-once delivery), each of
-- which is then recorded by its own outcome.

-- Adds an attempt of task ``id`` (one command when no other runs).
local function attempts_add(hash, id, attempt)
  if redis.call('HSETNX', hash, id, attempt) == 0 then
    redis.call('HSET', hash, id, redis.call('HGET', hash, id) .. '|' .. attempt)
  end
end

-- Whether ``held`` (the HASH's value, or false) lists an attempt for which
-- ``match(attempt)`` is true.
local function attempts_has(held, match)
  for attempt in string.gmatch(held or '', '[^|]+') do
    if match(attempt) then
      return true
    end
  end
  return false
end

-- Removes the first attempt of task ``id`` for which ``match(attempt)`` is true from
-- ``held`` (its value in the HASH, or false), and returns it (false when there is none).
local function attempts_remove(hash, id, held, match)
  local kept, found = {}, false
  for attempt in string.gmatch(held or '', '[^|]+') do
    if not found and match(attempt) then
      found = attempt
    else
      kept[#kept + 1] = attempt
    end
  end
  if found and #kept == 0 then
    redis.call('HDEL', hash, id)
  elseif found then
    redis.call('HSET', hash, id, table.concat(kept, '|'))
  end
  return found
end

-- A match for ``attempts_has`` and ``attempts_remove``: the attempt ``exact`` (an
-- outcome's, a task given back), or, when it is false, any attempt of worker ``worker``
-- (the recovery of a dead worker's tasks).
local function attempt_of(exact, worker)
  local suffix = ' ' .. worker
  return function(attempt)
    if exact then
      return attempt == exact
    end
    return string.sub(attempt, -#suffix) == suffix
  end
end
