-- Bring this master's record of one account's held locks up to date with
-- the lock keys on this master, and count the locks. The record is a sorted
-- set: member = the lock's token, score = when the lock ends on this master
-- (its TIME in milliseconds + the key's PTTL), so locks that expire leave
-- the count by themselves.
-- KEYS[1] the account's set (<prefix>held:…)
-- KEYS[2..n] lock keys of locks acquired, extended or released since the
--            last sync; ARGV[i-1] is the set's member for KEYS[i]: the
--            token of a single-key lock, "<token> <lock key>" for each key
--            of a multi-key lock (the token is what its key holds), so that
--            each key counts and a key is found by its own name, whichever
--            call changed it. A release or extend of one key names only
--            the token (a single-key call cannot tell a key of a set from a
--            lock of its own): when the set has the member "<token> <that
--            key>", that member is the one reconciled.
-- Each lock is (re)added with its key's end when its key holds its token
-- here, and removed otherwise (released, expired, taken over, or never
-- written on this master). Order does not matter: a release synced before
-- its acquire leaves nothing behind. Nothing but KEYS[1] is written.
-- Returns {n, c2, …, cn}: n the number of locks in the set that have not
-- ended, and for each KEYS[i] (i ≥ 2) 1 when its token is in the set
-- after this call, 0 when it was removed.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local counted = {}
for i = 2, #KEYS do
  local member = ARGV[i - 1]
  if not string.find(member, ' ', 1, true) then
    local ofSet = member .. ' ' .. KEYS[i]
    if redis.call('ZSCORE', KEYS[1], ofSet) then
      member = ofSet
    end
  end
  local pttl = -2
  if redis.call('GET', KEYS[i]) == string.match(member, '^[^ ]*') then
    pttl = redis.call('PTTL', KEYS[i])
  end
  if pttl > 0 then
    redis.call('ZADD', KEYS[1], now + pttl, member)
    counted[i - 1] = 1
  else
    redis.call('ZREM', KEYS[1], member)
    counted[i - 1] = 0
  end
end
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
local n = redis.call('ZCARD', KEYS[1])
if n > 0 then
  -- The set goes away with its last lock.
  local last = redis.call('ZRANGE', KEYS[1], -1, -1, 'WITHSCORES')
  redis.call('PEXPIRE', KEYS[1], math.max(tonumber(last[2]) - now, 1) + 1000)
end
local out = {n}
for i = 1, #counted do
  out[i + 1] = counted[i]
end
return out
