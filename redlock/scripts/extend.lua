-- Compare-and-extend: if the lock still holds this token, make its TTL
-- max(remaining, ARGV[2]). It never shortens a lock (a failed extend must not
-- cut the validity its holder was last told), never revives an expired key
-- and never touches another owner's key. Follows vote_prelude.lua and keep_record.lua.
-- The lock's fence record (fence.lua), when it belongs to this token, is given
-- the lock's remaining time, so the two keep one expiry. Where it is missing
-- (a master the acquire's write-back did not reach) or an earlier holder's,
-- it is written as "<ARGV[3]> <token>": only the holder of a granted lock
-- knows the token, so every master that extends the lock marks it granted
-- (redlock/granted.go).
-- KEYS[1] lock key, KEYS[2..4] as in the prelude, KEYS[5] the lock's fence
-- record (absent when fencing is off), KEYS[6] the lock's delay record
-- (redlock/lockdelay.go; absent when lock-delay is off): when it is this
-- token's, it keeps outliving the lock by the same delay.
-- ARGV[1] token, ARGV[2] requested TTL in milliseconds, ARGV[3] the lock's
-- fence when the caller knows it, else '0', ARGV[4] the max TTL in
-- milliseconds: with a delay record, the lock is extended to at most the
-- max TTL minus the delay, so that the record, like the lock, never
-- outlives the max TTL (as the acquire checks: ttl + delay ≤ max TTL),
-- ARGV[5] 'restore' (absent otherwise): sent by Client.Extend only after a
-- quorum extended the lock, to the masters that answered it absent: the
-- key is set again for the token (NX, PX ARGV[2], capped as an extend is
-- when the lock has a delay) with its fence record
-- when ARGV[3] knows the fence, and with its delay record when ARGV[6]
-- (the lock's lock-delay in milliseconds, '0': none) and KEYS[6] say it
-- has one, so that a lock held through masters that lost their copy one
-- after another (restarted empty, paused past the TTL) keeps more than a
-- bare quorum of copies, and its delay after it (redlock/extend.go). The
-- records are written only where they are missing or this token's, and
-- never shortened.
-- Returns the prelude's reply with code
--    1  extended (or already longer); value = its remaining milliseconds after;
--       extra = the holder's fence when its fence record is here, else '',
--       followed by ' ' and the lock's delay in milliseconds when its delay
--       record is here (what a restore elsewhere writes back)
--    0  absent (expired or released)
--   -1  held by another token
--   -2  this master lost its data; nothing written
if not intact then
  return reply(-2, 0)
end
-- pcall: a key of another type under the lock's name (a hash the user keeps
-- there) is held by another, not an error that reads as a failed master.
local v = redis.pcall('GET', KEYS[1])
if type(v) == 'table' then
  return reply(-1, 0)
end
if v == ARGV[1] then
  local ttl = tonumber(ARGV[2])
  local left = pttl(KEYS[1])
  local delay = 0
  if KEYS[6] and left >= 0 then
    local rd = pttl(KEYS[6])
    if rd > left and redis.call('GET', KEYS[6]) == v then
      delay = rd - left
    end
  end
  if delay > 0 and ARGV[4] and ttl + delay > tonumber(ARGV[4]) then
    ttl = tonumber(ARGV[4]) - delay
  end
  if left >= 0 and left < ttl then
    redis.call('PEXPIREAT', KEYS[1], at(ttl))
    left = ttl
  end
  if delay > 0 then
    redis.call('PEXPIREAT', KEYS[6], at(left + delay))
  end
  raiseHorizon(left + delay)
  local fence = ''
  if KEYS[5] and left > 0 then
    local f = redis.call('GET', KEYS[5])
    local sp = f and string.find(f, ' ', 1, true)
    if sp and string.sub(f, sp + 1) == v then
      redis.call('PEXPIREAT', KEYS[5], at(left + delay))
      fence = string.sub(f, 1, sp - 1)
    else
      redis.call('SET', KEYS[5], (ARGV[3] or '0') .. ' ' .. v, 'PXAT', at(left + delay))
    end
  end
  if delay > 0 then
    return reply(1, left, fence .. ' ' .. delay)
  end
  return reply(1, left, fence)
end
if v then
  return reply(-1, 0)
end
if ARGV[5] == 'restore' then
  local ttl = tonumber(ARGV[2])
  local delay = 0
  if KEYS[6] and ARGV[6] then
    delay = tonumber(ARGV[6])
  end
  ttl = restoreTTL(ttl, delay, tonumber(ARGV[4]))
  if not redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PXAT', at(ttl)) then
    return reply(0, 0) -- a key of another type
  end
  keepRecords(KEYS[5], KEYS[6], ARGV[3], ttl, delay)
  raiseHorizon(ttl + delay)
  return reply(1, ttl, ARGV[3])
end
return reply(0, 0)
