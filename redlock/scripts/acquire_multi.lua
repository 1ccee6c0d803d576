-- Acquire one master's vote for a multi-key lock: every key of the set for
-- this token, or none (redlock/multikey.go). Follows vote_prelude.lua; the
-- codes are acquire.lua's, for the set.
-- KEYS[1] the first lock key (the prelude's layout), KEYS[2..4] as in the
-- prelude (fencing is required: KEYS[4] is the counter), then from KEYS[5]
-- ARGV[4] keys per lock key: the lock key, its fence record (fence.lua) and,
-- with ARGV[4] = 3, its delay record (redlock/lockdelay.go)
-- ARGV[1] token, ARGV[2] TTL in milliseconds, ARGV[3] lock-delay in
-- milliseconds ('0': none; needs ARGV[4] = 3), ARGV[4] keys per lock key
-- Returns the prelude's reply with code
--    1  every key was set for this token; value = the fencing counter
--    0  some key is held by another token: nothing written; value = the
--       longest PTTL among the held keys, extra = 'g' when any of them is
--       a granted lock here (its fence record holds its holder's token);
--       or no key is held but one has a delay record: extra = 'd', value =
--       the longest delay record PTTL ('D' when one is a granted lock's:
--       acquire.lua)
--   -2  this master lost its data: nothing written; extra and value as
--       for 0 when a granted lock holds a key of the set, or when no key
--       is held and one is in a granted lock's delay ('D')
local stride = tonumber(ARGV[4])
local locks = {}
for i = 5, #KEYS, stride do
  locks[#locks + 1] = KEYS[i]
end
-- held reports the set's keys that another token holds: the longest PTTL
-- among them and 'g' when any is a granted lock here.
local function held()
  local longest, g = 0, ''
  for i = 5, #KEYS, stride do
    local left = pttl(KEYS[i])
    if left ~= -2 then
      if left == -1 then
        left = 0
      end
      if left > longest then
        longest = left
      end
      if g == '' then
        local hf = redis.call('MGET', KEYS[i], KEYS[i + 1])
        local holder, f = hf[1], hf[2]
        local sp = f and string.find(f, ' ', 1, true)
        if sp and string.sub(f, sp + 1) == holder then
          g = 'g'
        end
      end
    end
  end
  return longest, g
end
-- delays reports the set's live delay records here: the longest PTTL
-- among them, and the longest among those that are a granted lock's (the
-- record and the key's fence record hold one token: acquire.lua's 'D');
-- 0 when none. With free, only the records of keys free here count: a
-- held key of the set must not hide another key's granted delay (a lost
-- race's leftover SET of one key beside another key's delay).
local function delays(free)
  local longest, granted = 0, 0
  for i = 7, #KEYS, stride do
    local d = pttl(KEYS[i])
    if d > 0 and not (free and redis.call('EXISTS', KEYS[i - 2]) == 1) then
      longest = math.max(longest, d)
      if d > granted then
        local rf = redis.call('MGET', KEYS[i], KEYS[i - 1])
        local f = rf[2]
        local sp = f and string.find(f, ' ', 1, true)
        if sp and string.sub(f, sp + 1) == rf[1] then
          granted = d
        end
      end
    end
  end
  return longest, granted
end
-- grantedDelay is the longest delay of a granted lock on a free key of the
-- set (0 when none, or the set has no delay records).
local function grantedDelay()
  if stride ~= 3 then
    return 0
  end
  local _, granted = delays(true)
  return granted
end
if not intact then
  local left, g = held()
  if g == '' then
    local d = grantedDelay()
    if d > 0 then
      return reply(-2, d, 'D')
    end
  end
  return reply(-2, g == 'g' and left or 0, g)
end
-- EXISTS, not MGET: a key of another type (a hash the user keeps under
-- that name) holds the key as much as a lock does, as for SET NX.
if redis.call('EXISTS', unpack(locks)) > 0 then
  local left, g = held()
  if g == '' then
    local d = grantedDelay()
    if d > 0 then
      return reply(0, d, 'D')
    end
  end
  return reply(0, left, g)
end
local delay = stride == 3 and tonumber(ARGV[3]) or 0
if stride == 3 then
  -- No key of the set is held here: 'D' when any delay is a granted
  -- lock's, 'd' when none is.
  local d, granted = delays(false)
  if d > 0 then
    return reply(0, d, granted > 0 and 'D' or 'd')
  end
end
local ttl = tonumber(ARGV[2])
for i = 5, #KEYS, stride do
  redis.call('SET', KEYS[i], ARGV[1], 'PXAT', at(ttl))
  if delay > 0 then
    -- The record outlives the lock by the delay; the horizon covers it.
    redis.call('SET', KEYS[i + 2], ARGV[1], 'PXAT', at(ttl + delay))
  end
end
raiseHorizon(ttl + delay)
return reply(1, math.max(counter, 0))
