-- KEYS: 1) the enqueue counter of the home the task was taken in (it names the home's
--       keys: lib/limits.lua)
-- ARGV: 1) "hold": a run of the task goes on beyond its end as recorded (abandoned at a
--       hard limit or terminated, or its worker was taken for dead); "free": that run
--       has ended  2) the worker's id  3) the task's id  4) its payload (its limits)
-- Returns: 1 if the task has limits, else 0
-- The permits of a run that outlives its record stay held until its code really ends,
-- so that the key's next task never runs beside it (lib/limit_runs.lua, limits_hold_run).
-- @include keys
-- @include limit_runs
local limits = limits_of(ARGV[4])
if not limits then
  return 0
end
local base = keys_base(KEYS[1], 'counter')
if ARGV[1] == 'hold' then
  limits_hold_run(base, limits, ARGV[3], ARGV[2])
else
  limits_free_run(base, limits, ARGV[3], ARGV[2])
end
return 1
