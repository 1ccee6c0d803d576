-- Read one master's view of a lock atomically, without revealing the token:
-- only its SHA-1 leaves the master, enough to tell whether a quorum agrees.
-- Follows vote_prelude.lua.
-- KEYS[1] lock key, KEYS[2..4] as in the prelude, KEYS[5] the lock's fence
-- record (fence.lua; absent when fencing is off)
-- Returns the prelude's reply with code
--    1  held; value = remaining milliseconds (PTTL, -1 without expiry),
--       extra = sha1(token), followed by ' ' and the holder's fence when
--       the fence record holds it for this very token
--    0  absent
--   -2  this master lost its data: its answer does not count, but when
--       the key's holder has its fence record here (a granted lock, as
--       acquire.lua's 'g'), value and extra are as for 1: evidence from
--       any master that a lock was granted (redlock/status.go)
-- MGET, not GET: a key of another type reads as no lock, not an error.
local vf = KEYS[5] and redis.call('MGET', KEYS[1], KEYS[5]) or redis.call('MGET', KEYS[1])
local v = vf[1]
if v then
  local extra = redis.sha1hex(v)
  local f = vf[2]
  local granted = false
  if f then
    local sp = string.find(f, ' ', 1, true)
    if sp and string.sub(f, sp + 1) == v then
      extra = extra .. ' ' .. string.sub(f, 1, sp - 1)
      granted = true
    end
  end
  if not intact then
    if granted then
      return reply(-2, pttl(KEYS[1]), extra)
    end
    return reply(-2, 0)
  end
  return reply(1, pttl(KEYS[1]), extra)
end
if not intact then
  return reply(-2, 0)
end
return reply(0, 0)
