-- Opening shared by the extend scripts (extend.lua, extend_multi.lua),
-- after vote_prelude.lua: what their restores share (redlock/extend.go
-- restoreCopies).
-- keepRecord writes a record key k as value v for ms milliseconds where it
-- is missing or this token's (ARGV[1]: a fence record "<fence> <token>"
-- ends with it, a delay record is it), never shortening it; another
-- holder's record is left as it is.
local function keepRecord(k, v, ms)
  local cur = redis.call('GET', k)
  if cur and cur ~= ARGV[1] and string.sub(cur, -#ARGV[1] - 1) ~= ' ' .. ARGV[1] then
    return
  end
  if not cur or pttl(k) < ms then
    redis.call('SET', k, v, 'PXAT', at(ms))
  end
end
-- restoreTTL is a restore's TTL for a lock with delay milliseconds of
-- lock-delay: ttl, capped as an extend is so that ttl + delay stays within
-- the max TTL maxTTL.
local function restoreTTL(ttl, delay, maxTTL)
  if delay > 0 and ttl + delay > maxTTL then
    return maxTTL - delay
  end
  return ttl
end
-- keepRecords writes back a restored copy's records for ttl + delay
-- milliseconds: its delay record when it has a delay (delayKey, delay >
-- 0), its fence record when the fence is known (fenceKey, fence ~= '0').
local function keepRecords(fenceKey, delayKey, fence, ttl, delay)
  if delayKey and delay > 0 then
    keepRecord(delayKey, ARGV[1], ttl + delay)
  end
  if fenceKey and fence ~= '0' then
    keepRecord(fenceKey, fence .. ' ' .. ARGV[1], ttl + delay)
  end
end
