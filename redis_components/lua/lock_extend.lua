-- KEYS: 1) the lock
-- ARGV: 1) the holder's token  2) the new lease in ms, counted from now
-- Returns: 1 when the lease was extended; 0 when the token no longer holds the lock
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0
