-- A task's result: the HASH that every script writing a task's state writes through
-- these functions, and tasks/store/replies.py's task_record reads (RESULT_FIELDS there).
-- The fields of the HASH:
--   status             READY, SUCCESSFUL, FAILED or CANCELLED (RUNNING is not written:
--                      a READY task in the running hash runs)
--   message            its payload as enqueued (tasks/messages.py)
--   enqueued_at        when it was enqueued (epoch ms)
--   run_after          when it was due, for a task enqueued to run later (epoch ms)
--   payload            its payload as it waits to run again (cancelling it needs it)
--   started_at         when its first attempt started (epoch ms)
--   last_attempted_at  when its last attempt started (epoch ms)
--   finished_at        when it ended (epoch ms)
--   workers            the ids of the workers of its attempts, in order, space-separated
--   errors             a JSON list of its failed attempts' errors, in order
--   return_value       what it returned (JSON)
--   unique             the key that made it unique, freed when it is cancelled
--   workflow           CANCELLED when its workflow was cancelled in another home
--   metadata           what the task saved of its metadata (a JSON object; see
--                      queue_metadata.lua), else its message's is read
--   progress           what the task said last of how far it is: a JSON object
--                      {"done":…,"total":…,"note":…,"at":<server ms>} (result_progress)
--   trace              with tracing on, the trace context (W3C traceparent) of an attempt
--                      that ran a while, kept for the next if it is lost (tracing.py)

-- The fields one write sets, as a flat list of names and values (for one HSET).
local function result_set(fields, name, value)
  fields[#fields + 1] = name
  fields[#fields + 1] = value
end

-- A running task's progress, ``progress`` (a JSON object of "done", "total" and "note",
-- as tasks/messages.py's progress_json makes it), said at ``now`` (the server's ms).
local function result_progress(fields, progress, now)
  result_set(fields, 'progress', string.sub(progress, 1, -2) .. ',"at":' .. now .. '}')
end

-- An attempt, "<start ms> <worker id>" (lib/attempts.lua), after those the result
-- holds: workers and started are its fields as read (false when it has none).
local function result_attempt(fields, attempt, workers, started)
  local at, worker = string.match(attempt, '^(%d+) (.*)$')
  result_set(fields, 'last_attempted_at', at)
  result_set(fields, 'workers', workers and (workers .. ' ' .. worker) or worker)
  if not started then
    result_set(fields, 'started_at', at)
  end
end

-- A failed attempt's error (a JSON object) after those the result holds (errors: the
-- field as read, false when it has none).
local function result_error(fields, errors, entry)
  result_set(fields, 'errors',
    errors and (string.sub(errors, 1, -2) .. ',' .. entry .. ']') or ('[' .. entry .. ']'))
end

-- The task ended with ``status`` at ``now``. Returns ``fields``.
local function result_ended(fields, status, now)
  result_set(fields, 'status', status)
  result_set(fields, 'finished_at', now)
  return fields
end

-- A task that had ended waits to run again as ``payload`` (from its dead letter),
-- kept ``keep`` ms: the message it had is kept, or ``payload`` if it has none.
local function result_requeued(result, payload, keep)
  redis.call('HSET', result, 'status', 'READY', 'payload', payload)
  redis.call('HDEL', result, 'finished_at')
  redis.call('HSETNX', result, 'message', payload)
  redis.call('PEXPIRE', result, keep)
end

-- Writes ``fields`` and keeps the result ``keep`` ms from now (false: its expiry was
-- set already).
local function result_write(result, fields, keep)
  if #fields > 0 then
    redis.call('HSET', result, unpack(fields))
  end
  if keep then
    redis.call('PEXPIRE', result, keep)
  end
end
