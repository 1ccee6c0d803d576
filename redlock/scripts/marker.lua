-- Write the deployment marker if it is missing, stamped with this master's
-- own time: "redlockd <unix ms>". A later Client that finds a marker older
-- than the server's start knows the server restarted with data from before
-- that start (an RDB snapshot or a lazily fsynced AOF).
-- KEYS[1] marker key
-- Returns the marker's value after the call.
local cur = redis.call('GET', KEYS[1])
if cur then
  return cur
end
local t = redis.call('TIME')
local v = 'redlockd ' .. t[1] .. string.format('%03d', math.floor(tonumber(t[2]) / 1000))
redis.call('SET', KEYS[1], v)
return v
