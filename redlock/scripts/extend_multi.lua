-- extend.lua for a multi-key lock: where this token holds every key of the
-- set, make each last max(remaining, ARGV[2]); where it does not hold them
-- all, touch nothing (a master that lost part of a set does not vote for
-- it) — except in a restore (ARGV[6], below). Follows vote_prelude.lua and keep_record.lua.
-- KEYS[1] the first lock key, KEYS[2..4] as in the prelude, then from
-- KEYS[5] ARGV[4] keys per lock key: the lock key, its fence record[, its
-- delay record]
-- ARGV[1] token, ARGV[2] requested TTL in milliseconds, ARGV[3] the lock's
-- fence when the caller knows it, else '0', ARGV[4] keys per
-- lock key, ARGV[5] the max TTL in milliseconds (a key with a delay
-- record is extended to at most the max TTL minus its delay, extend.lua),
-- ARGV[6] 'restore' (absent otherwise) and ARGV[7] the lock's delay in
-- milliseconds ('0': none): sent by Client.Extend only after a quorum
-- extended the set, to the masters that answered 0 (some key absent, none
-- another token's); there, unless a key of the set exists as another type
-- (EXISTS, as acquire_multi.lua: then nothing is written and the answer
-- is 0), every absent key of the set is set again (PX ARGV[2], capped as
-- an extend is when the lock has a delay) with its fence record when
-- ARGV[3] knows the fence and its delay record, and every key still this
-- token's is extended to that TTL (as extend.lua's restore;
-- redlock/extend.go restoreCopies)
-- Returns the prelude's reply with code
--    1  extended; value = the shortest remaining milliseconds among the
--       keys after; extra = the holder's fence when a fence record of the
--       set holds it, else '', followed by ' ' and the longest lock-delay
--       in milliseconds among the set's delay records here, when there is one
--    0  some key of the set is absent here and none is another token's
--   -1  some key of the set is held by another token
--   -2  this master lost its data; nothing written
if not intact then
  return reply(-2, 0)
end
local stride = tonumber(ARGV[4])
local locks = {}
for i = 5, #KEYS, stride do
  locks[#locks + 1] = KEYS[i]
end
local holders = redis.call('MGET', unpack(locks))
local code = 1
for j = 1, #holders do
  local v = holders[j]
  if v ~= ARGV[1] then
    if v then
      return reply(-1, 0)
    end
    code = 0
  end
end
if code == 0 then
  if ARGV[6] ~= 'restore' then
    return reply(0, 0)
  end
  local absent = {}
  for j = 1, #holders do
    if not holders[j] then
      absent[#absent + 1] = locks[j]
    end
  end
  -- MGET answers nil for a key of another type: such a key is held.
  if redis.call('EXISTS', unpack(absent)) > 0 then
    return reply(0, 0)
  end
  local ttl = tonumber(ARGV[2])
  local delay = 0
  if stride == 3 then
    delay = tonumber(ARGV[7] or '0')
  end
  ttl = restoreTTL(ttl, delay, tonumber(ARGV[5]))
  local j = 0
  for i = 5, #KEYS, stride do
    j = j + 1
    if holders[j] then
      -- This token's (no key of the set is another's here): keep it to ttl.
      if pttl(KEYS[i]) < ttl then
        redis.call('PEXPIREAT', KEYS[i], at(ttl))
      end
    else
      redis.call('SET', KEYS[i], ARGV[1], 'PXAT', at(ttl))
    end
    keepRecords(KEYS[i + 1], stride == 3 and KEYS[i + 2], ARGV[3], ttl, delay)
  end
  raiseHorizon(ttl + delay)
  return reply(1, ttl, ARGV[3])
end
local asked = tonumber(ARGV[2])
local shortest, longest, fence, delayed = -1, 0, '', 0
for i = 5, #KEYS, stride do
  local left = pttl(KEYS[i])
  local delay = 0
  if stride == 3 and left >= 0 then
    local rd = pttl(KEYS[i + 2])
    if rd > left and redis.call('GET', KEYS[i + 2]) == ARGV[1] then
      delay = rd - left
    end
  end
  local ttl = asked
  if delay > 0 and ARGV[5] and ttl + delay > tonumber(ARGV[5]) then
    ttl = tonumber(ARGV[5]) - delay
  end
  if left >= 0 and left < ttl then
    redis.call('PEXPIREAT', KEYS[i], at(ttl))
    left = ttl
  end
  if delay > 0 then
    redis.call('PEXPIREAT', KEYS[i + 2], at(left + delay))
    delayed = math.max(delayed, delay)
  end
  if left + delay > longest then
    longest = left + delay
  end
  if shortest < 0 or left < shortest then
    shortest = left
  end
  if left > 0 then
    local f = redis.call('GET', KEYS[i + 1])
    local sp = f and string.find(f, ' ', 1, true)
    if sp and string.sub(f, sp + 1) == ARGV[1] then
      redis.call('PEXPIREAT', KEYS[i + 1], at(left + delay))
      if fence == '' then
        fence = string.sub(f, 1, sp - 1)
      end
    else
      redis.call('SET', KEYS[i + 1], ARGV[3] .. ' ' .. ARGV[1], 'PXAT', at(left + delay))
    end
  end
end
raiseHorizon(longest)
if delayed > 0 then
  return reply(1, shortest, fence .. ' ' .. delayed)
end
return reply(1, shortest, fence)
