-- KEYS: 1) the lock
-- ARGV: 1) the holder's token  2) milliseconds (may be 0 or less)  3) "add": add them to what
--       is left of the lease; "set": make the lease that long from now
-- Returns: the new lease in ms; when that comes to 0 ms or less, the lease stays as it is (as
--          in redis-py) and what is left of it; 0 when the token no longer holds the lock
if redis.call('GET', KEYS[1]) ~= ARGV[1] then
  return 0
end
local lease = tonumber(ARGV[2])
if ARGV[3] == 'add' then
  lease = lease + math.max(redis.call('PTTL', KEYS[1]), 0)
end
if lease <= 0 then
  return math.max(redis.call('PTTL', KEYS[1]), 1)
end
redis.call('PEXPIRE', KEYS[1], lease)
return lease
