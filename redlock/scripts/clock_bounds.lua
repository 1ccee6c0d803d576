-- The clock bounds registry: a sorted set whose members are the clock
-- bounds of the clients of these masters, "f:u:r" (integers): the drift
-- factor in parts per million, the most two clock readings may be
-- uncertain by together in µs (maxUncertainty) and the oldest a reference
-- reading may be in µs (maxRefAge). Each is scored with the time (unix ms,
-- this master's clock) until which a client with those bounds may still
-- hold a lock: its last registration plus its max TTL plus two probe
-- rounds. Every Client registers its own bounds at every health probe and
-- judges clocks by the strictest registered, and budgets its validities
-- for the loosest (clockbounds.go).
-- Entries no Client writes are skipped: a member not of that form, or with
-- a field outside what New accepts (f ≤ ARGV[4], 0 < u ≤ ARGV[5],
-- ARGV[6] ≤ r ≤ ARGV[7]). A score beyond the ceiling counts as the
-- ceiling, so PEXPIRE never fails (which would stop every registration).
-- KEYS[1] registry
-- ARGV[1] this client's member; "" reads without registering
-- ARGV[2] how long to keep this client's entry, ms
-- ARGV[3] the ceiling of a score, ms from now
-- ARGV[4] the largest drift factor, ppm
-- ARGV[5] the largest uncertainty, µs
-- ARGV[6], ARGV[7] the smallest and largest reference age, µs
-- Returns {live entries, smallest f, largest f, smallest u, smallest r,
-- largest u + f × r (µs), entries skipped or capped}; the five bounds are
-- 0 when there is no live entry.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', '(' .. now)
local ceiling = tonumber(ARGV[3])
local fmax, umax = tonumber(ARGV[4]), tonumber(ARGV[5])
local rmin, rmax = tonumber(ARGV[6]), tonumber(ARGV[7])
local mine = now + tonumber(ARGV[2])
local n, last, odd = 0, 0, 0
local lof, hif, lou, lor, blind = 0, 0, 0, 0, 0
local function take(f, u, r)
  local b = u + math.floor(f * r / 1000000)
  if n == 0 then
    lof, hif, lou, lor, blind = f, f, u, r, b
  else
    lof, hif = math.min(lof, f), math.max(hif, f)
    lou, lor, blind = math.min(lou, u), math.min(lor, r), math.max(blind, b)
  end
  n = n + 1
end
local z = redis.call('ZRANGE', KEYS[1], 0, -1, 'WITHSCORES')
for i = 1, #z, 2 do
  local s = tonumber(z[i + 1])
  if s > now + ceiling then
    s, odd = now + ceiling, odd + 1
  end
  local f, u, r = string.match(z[i], '^(%d+):(%d+):(%d+)$')
  f, u, r = tonumber(f), tonumber(u), tonumber(r)
  if not f or f > fmax or u < 1 or u > umax or r < rmin or r > rmax then
    odd = odd + 1
  elseif z[i] == ARGV[1] then
    if s > mine then mine = s end -- taken once, below
  else
    take(f, u, r)
    if s > last then last = s end
  end
end
if ARGV[1] ~= '' then
  local f, u, r = string.match(ARGV[1], '^(%d+):(%d+):(%d+)$')
  take(tonumber(f), tonumber(u), tonumber(r))
  redis.call('ZADD', KEYS[1], string.format('%d', mine), ARGV[1])
  if mine > last then last = mine end
  redis.call('PEXPIRE', KEYS[1], string.format('%d', last - now + 1))
end
return {n, lof, hif, lou, lor, blind, odd}
