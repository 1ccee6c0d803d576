-- Opening shared by the scripts that vote (acquire, extend, status): it reads
-- this master's clock and the deployment state that a master which lost its
-- data (FLUSHALL, FLUSHDB, SWAPDB, DEL, eviction, REPLICAOF, restart) no
-- longer has, so the client can refuse the vote in the same round trip.
-- KEYS[2] deployment marker,
-- KEYS[3] lease horizon (unix ms by this master's clock), KEYS[4] fencing
-- counter (absent when fencing is off).
-- Every reply is one string, fields separated by one space:
--   "code value sec usec horizon horizonAfter counter markerLength marker extra"
--   code, value, extra  the script's own result (extra: the rest of the
--                       string after the marker, spaces and all);
--   sec, usec           this master's TIME when the script ran;
--   horizon             the lease horizon before the script (it only ever
--                       grows, so a lower value later means the data went
--                       back in time: a rollback to older data);
--   horizonAfter        the lease horizon after the script;
--   counter             the fencing counter (-1 when fencing is off or it
--                       is missing): it only ever grows, so a lower value
--                       later means a rollback too, also one the horizon
--                       does not show (a longer lock granted before the
--                       older copy kept the horizon where it is);
--   markerLength, marker  the marker's value ('' when missing, length 0)
--                       and its length in bytes (the marker holds spaces).
-- One string, not a nine-element array: the master encodes one bulk reply
-- and the client reads it with one allocation and no boxing per field
-- (redlock/vote.go parseVote; docs/performance.md has the measurement).
-- The script does not read INFO stats (evicted_keys,
-- total_commands_processed): the lane reads them once per pipelined batch,
-- after the batch's votes (statsReading, redlock/batchstats.go).
-- now, nowms: this master's TIME (expiry.lua, which opens every vote script).
-- One MGET reads the marker, the horizon and the counter (false where
-- missing): each redis.call costs the master about a microsecond, the
-- calls' count is most of a vote's cost.
local state
if KEYS[4] then
  state = redis.call('MGET', KEYS[2], KEYS[3], KEYS[4])
else
  state = redis.call('MGET', KEYS[2], KEYS[3])
end
local marker = state[1]
local intact = marker and state[2] and (KEYS[4] == nil or state[3]) and true
local horizon = tonumber(state[2] or '0')
local horizonBefore = horizon
local counter = -1
if KEYS[4] then
  counter = tonumber(state[3] or '-1')
end
local function reply(code, value, extra)
  local mk = marker or ''
  -- The marker and extra are concatenated, not formatted: string.format's
  -- %s stops at a NUL byte, and both may hold any bytes.
  return string.format('%d %d %s %s %d %d %d %d ', code, value, now[1], now[2], horizonBefore, horizon, counter, #mk) .. mk .. (extra or '')
end
-- raiseHorizon max-assigns the lease horizon to now + ms: no lock granted
-- with this master's vote can outlive it (redlock/horizon.go).
local function raiseHorizon(ms)
  local h = nowms + ms
  if horizon < h then
    horizon = h
    redis.call('SET', KEYS[3], string.format('%d', h))
  end
end
