-- Opening shared by the scripts that read or set a lock's expiry (the vote
-- scripts, after vote_prelude.lua's header, and the fence write-backs): this
-- master's clock, read once, and the one instant every expiry the script
-- reads or sets counts from. Redis 7.0 does not freeze its clock while a
-- script runs: a millisecond that ticks between a PTTL and a PEXPIRE, or
-- between two PEXPIREs, would make a lock's records expire a millisecond
-- before or after the time the script meant (a delay record's lead over
-- its lock drifting by a millisecond an extend, a fence record outliving
-- the lease horizon). pttl reads an expiry (PEXPIRETIME, Redis 7.0) as
-- milliseconds from nowms, and at gives the absolute time (PXAT,
-- PEXPIREAT) ms milliseconds after nowms, so one script keeps exact
-- distances between the expiries it sets.
local now = redis.call('TIME')
local nowms = tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000)
-- pttl is PTTL as of nowms: -2 missing, -1 no expiry, else the
-- milliseconds from nowms to its expiry (0 when that is not after nowms: a
-- key the script still sees).
local function pttl(k)
  local e = redis.call('PEXPIRETIME', k)
  if e < 0 then
    return e
  end
  return math.max(e - nowms, 0)
end
-- at is the unix time in milliseconds ms after nowms, as an argument of
-- PXAT or PEXPIREAT.
local function at(ms)
  return string.format('%d', nowms + ms)
end
