-- Read one master's view of a lock atomically, without revealing the token:
-- only its SHA-1 leaves the master, enough to tell whether a quorum agrees.
-- KEYS[1] lock key
-- Returns {sha1(value) or false, pttl}; pttl is -2 when the key is absent.
local v = redis.call('GET', KEYS[1])
if v then
  return {redis.sha1hex(v), redis.call('PTTL', KEYS[1])}
end
return {false, -2}
