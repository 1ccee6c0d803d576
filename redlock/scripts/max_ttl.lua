-- The max TTL registry: a sorted set whose members are the max TTLs (ms) of
-- the clients of these masters, each scored with the time (unix ms, this
-- master's clock) until which a client with that max TTL may still hold a
-- lock: its last registration plus its max TTL. Every Client registers at
-- every health probe; a loss quarantine is bounded by the longest TTL
-- registered, not by the repairing Client's own max TTL, which may be
-- shorter than another client's (a daemon with max_ttl 5s beside a library
-- client allowing 12s).
-- Entries no Client writes are not trusted as they are: a member that is
-- not a number, or is ≤ 0, cannot be a max TTL and is skipped; a member or
-- a score beyond the ceiling (MaxTTLCeiling: New refuses a longer max TTL,
-- so no Client registered it) counts as the ceiling, so a planted
-- 999999999999999999 neither overflows a Client's arithmetic nor makes
-- PEXPIRE fail (which would stop every registration).
-- KEYS[1] registry
-- ARGV[1] this client's max TTL in ms; 0 reads without registering
-- ARGV[2] the ceiling in ms
-- Returns {the longest max TTL registered and not expired (ms), 0 for none;
-- how many entries were skipped or capped}.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', '(' .. now)
local ttl = tonumber(ARGV[1])
local ceiling = tonumber(ARGV[2])
local mine = now + ttl
local best, last, odd = 0, 0, 0
local r = redis.call('ZRANGE', KEYS[1], 0, -1, 'WITHSCORES')
for i = 1, #r, 2 do
  local m, s = tonumber(r[i]), tonumber(r[i + 1])
  if s > now + ceiling then
    s, odd = now + ceiling, odd + 1
  end
  if not m or m ~= m or m <= 0 then
    odd = odd + 1
  else
    if m > ceiling then
      m, odd = ceiling, odd + 1
    end
    if m > best then best = m end
    if s > last then last = s end
  end
  if r[i] == ARGV[1] and s > mine then mine = s end
end
if ttl > 0 then
  redis.call('ZADD', KEYS[1], string.format('%d', mine), ARGV[1])
  if ttl > best then best = ttl end
  if mine > last then last = mine end
  redis.call('PEXPIRE', KEYS[1], string.format('%d', last - now + 1))
end
return {best, odd}
