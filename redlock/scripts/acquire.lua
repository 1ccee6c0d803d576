-- Acquire one master's vote (Redis Redlock page, step 2), and report this
-- master's fencing counter with the vote. Follows vote_prelude.lua.
-- KEYS[1] lock key, KEYS[2..4] as in the prelude, KEYS[5] the lock's fence
-- record (fence.lua; absent when fencing is off), KEYS[6] the lock's delay
-- record (redlock/lockdelay.go; absent when lock-delay is off)
-- ARGV[1] token (random, 32 hex chars), ARGV[2] TTL in milliseconds,
-- ARGV[3] lock-delay in milliseconds (with KEYS[6]; '0': none)
-- Returns the prelude's reply with code
--    1  the key was set for this token; value = the fencing counter (0 without fencing)
--    0  another token holds it; value = its remaining milliseconds (PTTL);
--       extra = 'g' when the holder's fence record is here: its acquire
--       reached a quorum, so it is a granted lock, not a contender's vote
--       (redlock/granted.go)
--       extra = 'd' when the key is free but its delay record is here: the
--       last lock ended without a release; value = the record's PTTL;
--       'D' instead when that lock was granted (delayed, below)
--   -2  this master lost its data (marker, horizon or counter missing); nothing
--       written; extra = 'g' and value = its PTTL, as for 0, when the
--       key's holder is granted; extra = 'D' and value = the record's
--       PTTL when the key is free in a granted lock's delay
-- granted reports 'g' when the key's holder has its fence record here:
-- its acquire reached a quorum. Read whether or not this master is intact:
-- one that lost its bookkeeping keys may still hold a granted lock.
local function granted()
  if not KEYS[5] then
    return ''
  end
  local hf = redis.call('MGET', KEYS[1], KEYS[5])
  local holder, f = hf[1], hf[2]
  local sp = f and string.find(f, ' ', 1, true)
  if sp and string.sub(f, sp + 1) == holder then
    return 'g'
  end
  return ''
end
-- delayed reports a delay here: the PTTL of the key's delay record when the
-- key is free and the record live (0 otherwise), and 'D' when the record is
-- a granted lock's, 'd' when not. A granted lock's fence record, written
-- only after a quorum voted, holds the same token and lives as long as its
-- delay record (fence.lua, extend.lua): one master that still shows it
-- refuses the grant as a granted lock does (redlock/lockdelay.go), so a
-- record lost silently elsewhere cannot hand the key out in its delay.
local function delayed()
  local d = pttl(KEYS[6])
  if d <= 0 or redis.call('EXISTS', KEYS[1]) == 1 then
    return 0, ''
  end
  local rf = redis.call('MGET', KEYS[6], KEYS[5])
  local f = rf[2]
  local sp = f and string.find(f, ' ', 1, true)
  if sp and string.sub(f, sp + 1) == rf[1] then
    return d, 'D'
  end
  return d, 'd'
end
if not intact then
  local g = granted()
  if g == '' and KEYS[6] then
    local d, e = delayed()
    if e == 'D' then
      return reply(-2, d, e)
    end
  end
  return reply(-2, g == 'g' and pttl(KEYS[1]) or 0, g)
end
if KEYS[6] then
  local d, e = delayed()
  if d > 0 then
    return reply(0, d, e)
  end
end
local ttl = tonumber(ARGV[2])
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PXAT', at(ttl)) then
  local delay = KEYS[6] and tonumber(ARGV[3]) or 0
  if delay > 0 then
    -- The record outlives the lock by the delay; the horizon covers it.
    redis.call('SET', KEYS[6], ARGV[1], 'PXAT', at(ttl + delay))
  end
  raiseHorizon(ttl + delay)
  -- The prelude's reading of the counter: nothing in between writes it.
  return reply(1, math.max(counter, 0))
end
return reply(0, pttl(KEYS[1]), granted())
