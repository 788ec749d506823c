-- Delete a user's join counter, if the user is in no chat (their index is empty).
-- KEYS: 1) the user's index hash  2) the user's version counter
-- ARGV: none
-- Returns: 1 if the counter was deleted (or did not exist), 0 if the user is in a chat
if redis.call('EXISTS', KEYS[1]) == 1 then
  return 0
end
redis.call('DEL', KEYS[2])
return 1
