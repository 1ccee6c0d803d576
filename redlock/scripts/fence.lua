-- Write a fencing token back: raise the counter to ARGV[2] (never lower it),
-- but only where this token still holds the lock, so a write-back can never
-- outlive or outrun the acquire it belongs to, and only where this master
-- still has the deployment's state. Store the fence with the lock in its
-- fence record "<fence> <token>", expiring with the lock, or with its delay
-- record when the lock has a lock-delay (status reports it; the token in it
-- ties it to this holder, fence.go; acquire.lua reads it in the delay).
-- KEYS[1] lock key, KEYS[2] marker, KEYS[3] lease horizon, KEYS[4] fencing counter,
-- KEYS[5] the lock's fence record (absent: not stored), KEYS[6] its delay
-- record (redlock/lockdelay.go; absent when lock-delay is off)
-- ARGV[1] token, ARGV[2] fencing token, ARGV[3] '1' when the lock has a
-- lock-delay (absent otherwise: KEYS[6] is not read)
-- Returns "code sec usec" (one string, as the vote scripts' reply): code 1
-- written (or already ≥), 0 the lock is not held by this token, -2 this
-- master lost its data (marker, horizon or counter missing); sec, usec this
-- master's TIME (after 1, its counter is at least ARGV[2] from then on,
-- unless it loses data).
-- now, nowms: this master's TIME (expiry.lua, which opens this script).
local function reply(code)
  return code .. ' ' .. now[1] .. ' ' .. now[2]
end
-- One MGET: the lock's holder, the marker, the horizon and the counter
-- (false where missing).
local s = redis.call('MGET', KEYS[1], KEYS[2], KEYS[3], KEYS[4])
if not (s[2] and s[3] and s[4]) then
  return reply(-2)
end
if s[1] ~= ARGV[1] then
  return reply(0)
end
local cur = tonumber(s[4] or '0')
if cur < tonumber(ARGV[2]) then
  redis.call('SET', KEYS[4], ARGV[2])
end
if KEYS[5] then
  -- The lock's PTTL as of nowms: the record expires with the lock, to the
  -- millisecond (expiry.lua).
  local left = pttl(KEYS[1])
  if left > 0 then
    if ARGV[3] == '1' and KEYS[6] then
      -- A lock with a delay: the record lives as long as this token's delay
      -- record, so that a vote in the delay can tell a granted lock's
      -- delay ('D', acquire.lua).
      local rd = pttl(KEYS[6])
      if rd > left and redis.call('GET', KEYS[6]) == ARGV[1] then
        left = rd
      end
    end
    redis.call('SET', KEYS[5], ARGV[2] .. ' ' .. ARGV[1], 'PXAT', at(left))
  end
end
return reply(1)
