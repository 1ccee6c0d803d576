-- Bring a master that lost its data back into the deployment: raise its
-- fencing counter and lease horizon (max-assign), then write the repair
-- marker "repaired <unix ms> <nonce> <until unix ms> <run_id> ev=<evicted
-- keys>[ since=<unix ms>][ operator]", all by this master's own clock. Every Client keeps the master's votes out
-- until <until>; the run_id ties the marker to this server, so a copy of
-- another master's data (REPLICAOF) is never taken for a repair. "operator"
-- marks `redlockd repair-fences`' repairs of masters that lost their data,
-- whose <until> is the operator's
-- max TTL rather than a quorum's lease horizon: a Client that knows a
-- longer max TTL keeps the master out for that long after the repair. A
-- repair never
-- shortens a quarantine: when the marker found is a repair marker whose
-- <until> is later, that <until> is kept (a second `redlockd repair-fences`,
-- which finds every marker in place, once wrote <until> = now and so let
-- every daemon started after it count the wiped masters at once).
-- KEYS[1] marker, KEYS[2] lease horizon, KEYS[3] fencing counter (absent when fencing is off)
-- ARGV[1] counter, ARGV[2] horizon in milliseconds from now, ARGV[3] nonce,
-- ARGV[4] quarantine in milliseconds from now, ARGV[5] the server's run_id,
-- ARGV[6] "operator" for repair-fences on a master that lost its data,
-- "kept" for repair-fences on a master it found intact (the repair ends no
-- loss: records written before it are there), "" for a Client's repair
-- ARGV[7] (optional) the marker the caller read and repairs from (a Client
-- completing repair-fences' repair, redlock/horizon.go): when the marker is
-- another now, nothing is written and the reply is {'', 0, ''}
-- Returns {marker, counter after, replication ID (INFO master_replid)}.
if ARGV[7] and redis.call('GET', KEYS[1]) ~= ARGV[7] then
  return {'', 0, ''}
end
local t = redis.call('TIME')
local ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local counter = 0
if KEYS[3] then
  -- A missing counter is written even when the target is 0 (no fence was
  -- ever issued: a new deployment before its first lock): the vote scripts
  -- and the probe take a missing counter for lost data, so a repair must
  -- not leave it missing.
  local cur = redis.call('GET', KEYS[3])
  counter = tonumber(cur or '0')
  if not cur or counter < tonumber(ARGV[1]) then
    counter = tonumber(ARGV[1])
    redis.call('SET', KEYS[3], ARGV[1])
  end
end
local h = ms + tonumber(ARGV[2])
if tonumber(redis.call('GET', KEYS[2]) or '0') < h then
  redis.call('SET', KEYS[2], string.format('%d', h))
end
local untl = ms + tonumber(ARGV[4])
local by = ARGV[6] or ''
local old = redis.call('GET', KEYS[1])
local since
if by == 'kept' and old and string.sub(old, 1, 9) == 'repaired ' and not string.find(' ' .. old .. ' ', ' kept ', 1, true) then
  -- An earlier repair ended a loss here: a repair that finds the master
  -- intact now must not say it kept its data (the records written before
  -- that loss are gone), nor that a loss ended now (registrations and
  -- records written since that repair are here): since= carries when the
  -- earlier loss ended (its own since=, or its time), what the marker
  -- found said (redlock/dataloss.go, marker).
  by = ''
  since = string.match(old, ' since=(%d+)') or string.match(old, '^repaired (%d+)')
end
if old then
  local u = string.match(old, '^repaired %d+ %S+ (%d+)')
  if u and tonumber(u) > untl then
    untl = tonumber(u)
    -- The <until> kept is the operator's: so is the rule that reads it,
    -- and so is the loss it bounds (never "kept").
    if string.find(' ' .. old .. ' ', ' operator ', 1, true) then by = 'operator' end
  end
end
-- ev=<evicted_keys> now: a Client adopting the marker takes it as the
-- baseline, so evictions between this repair and its adoption are seen.
local ev = string.match(redis.call('INFO', 'stats'), 'evicted_keys:(%d+)') or '0'
local v = 'repaired ' .. string.format('%d', ms) .. ' ' .. ARGV[3] .. ' ' .. string.format('%d', untl) .. ' ' .. ARGV[5] .. ' ev=' .. ev
if since then v = v .. ' since=' .. since end
if by == 'operator' or by == 'kept' then v = v .. ' ' .. by end
redis.call('SET', KEYS[1], v)
local replid = string.match(redis.call('INFO', 'replication'), 'master_replid:(%w+)') or ''
return {v, counter, replid}
