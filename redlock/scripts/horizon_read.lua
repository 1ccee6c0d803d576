-- Read the lease horizon with this master's time, atomically, for the
-- health probe's check that it never goes down.
-- KEYS[1] lease horizon
-- Returns {sec, usec, horizon}; horizon is -1 when the key is missing.
local t = redis.call('TIME')
local h = redis.call('GET', KEYS[1])
return {tonumber(t[1]), tonumber(t[2]), h and tonumber(h) or -1}
