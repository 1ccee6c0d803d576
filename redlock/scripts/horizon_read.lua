-- Read the lease horizon and the fencing counter with this master's time,
-- atomically, for the health probe's check that neither ever goes down.
-- KEYS[1] lease horizon, KEYS[2] fencing counter (absent when fencing is off)
-- Returns {sec, usec, horizon, counter}; horizon and counter are -1 when
-- missing (or, for the counter, not asked for).
local t = redis.call('TIME')
local h = redis.call('GET', KEYS[1])
local c = KEYS[2] and redis.call('GET', KEYS[2])
return {tonumber(t[1]), tonumber(t[2]), h and tonumber(h) or -1, c and tonumber(c) or -1}
