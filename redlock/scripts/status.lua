-- Read one master's view of a lock atomically, without revealing the token:
-- only its SHA-1 leaves the master, enough to tell whether a quorum agrees.
-- Follows vote_prelude.lua.
-- KEYS[1] lock key, KEYS[2..4] as in the prelude
-- Returns the prelude's reply with code
--    1  held; value = remaining milliseconds (PTTL, -1 without expiry), extra = sha1(token)
--    0  absent
--   -2  this master lost its data: its answer says nothing about the lock
if not intact then
  return reply(-2, 0)
end
local v = redis.call('GET', KEYS[1])
if v then
  return reply(1, redis.call('PTTL', KEYS[1]), redis.sha1hex(v))
end
return reply(0, 0)
