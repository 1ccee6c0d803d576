-- Create the deployment state on a master of a brand-new deployment (or
-- complete it on one from before the lease horizon existed): the lease
-- horizon, the fencing counter and, last, the marker
-- "redlockd <unix ms> <nonce>", stamped with this master's own time. Each is
-- written only if missing. A later Client that finds a marker older than the
-- server's start knows the server restarted with data from before that start.
-- KEYS[1] marker, KEYS[2] lease horizon, KEYS[3] fencing counter (absent when fencing is off)
-- ARGV[1] nonce (hex), ARGV[2] initial horizon, milliseconds from now
-- Returns the marker's value after the call.
local t = redis.call('TIME')
local ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('SET', KEYS[2], string.format('%d', ms + tonumber(ARGV[2])), 'NX')
if KEYS[3] then
  redis.call('SET', KEYS[3], '0', 'NX')
end
local cur = redis.call('GET', KEYS[1])
if cur then
  return cur
end
local v = 'redlockd ' .. string.format('%d', ms) .. ' ' .. ARGV[1]
redis.call('SET', KEYS[1], v)
return v
