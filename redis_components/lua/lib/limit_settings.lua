-- The limits of the TASK_LIMITS setting, which a worker's takes apply (see
-- lib/limits.lua and tasks/limits.py).

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
