-- KEYS: 1) the ZSET of worker leases (member: worker id, score: expiry in epoch ms)
-- ARGV: 1) the lease in ms  2...) the ids of workers whose processes are alive
-- Returns: how many leases were renewed
-- The supervisor renews its live children's leases with this, whatever their tasks do
-- (one holding the GIL stops the child's own heartbeat thread). A worker without a lease
-- (not yet registered, deregistered, or taken for dead) is left without one: its own
-- heartbeat registers it again.
local time = redis.call('TIME')
local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
local expiry = now + tonumber(ARGV[1])
local renewed = 0
for i = 2, #ARGV do
  local current = redis.call('ZSCORE', KEYS[1], ARGV[i])
  if current and tonumber(current) < expiry then
    redis.call('ZADD', KEYS[1], expiry, ARGV[i])
    renewed = renewed + 1
  end
end
return renewed
