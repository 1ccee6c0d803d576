-- The placement registry (daemon/placements.go), after the vote prelude
-- (redlock.NewQuorumScript): read the scores of the layouts that may not
-- lock beside this daemon's, and unless one of them may still hold a lock,
-- register this daemon's layout until now + ARGV[2] ms (a score only ever
-- raised), drop entries a day old, keep the key two days.
-- KEYS[1] the registry (a sorted set), KEYS[2..] as in the prelude
-- ARGV[1] this daemon's layout, ARGV[2] ms it may lock on it after now,
-- ARGV[3] ms a lock of another layout may stand after its daemon's
-- registration ended (the max TTL): while a layout that may not lock beside
-- this one has a score + ARGV[3] ahead of now, this daemon's layout is not
-- registered here (it grants nothing: daemon/placements.go, "The layout
-- gate"),
-- ARGV[4] a layout whose score to read too ('' none: a moving daemon reads
-- its previous groups', step 2's end).
-- Members "admitted <K> <b> <layout>" are admissions (placements_admit.lua),
-- not layouts.
-- Returns reply(1, the highest score of the layouts that may not lock
-- beside this one or 0, extra) having registered, reply(0, that highest,
-- extra) when one of them may still hold locks (nothing written), or
-- reply(-2, 0) without writing on a master that lost its data; extra is
-- ARGV[4]'s score or 0, then "<K>:<b>" for each admission of ARGV[1] here,
-- separated by spaces.
if not intact then
  return reply(-2, 0)
end
local alive = tonumber(ARGV[2])
-- covers: the group lists a layout locks every key in. "stable X" locks in
-- X; "moving A>B" in A and in B, all or nothing (redlock/moving.go). An
-- unknown form locks in none: it shares nothing, so it excludes every
-- other layout (fail closed).
local function covers(m)
  local phase = string.sub(m, 1, 7)
  if phase == 'stable ' then
    return { string.sub(m, 8) }
  end
  if phase == 'moving ' then
    local gt = string.find(m, '>', 8, true)
    if gt then
      return { string.sub(m, 8, gt - 1), string.sub(m, gt + 1) }
    end
  end
  return {}
end
-- Two layouts may lock side by side when both lock every key in one same
-- list of groups: both then ask the same group for each key. A list of one
-- group is the first group (the registry lives on its masters), whatever
-- its name: every list of one group registered here is that group under
-- another name (a former masters list is "default"), every key on the same
-- masters, the same counters and records.
local function single(list)
  return not string.find(list, ',', 1, true)
end
local function shares(a, b)
  for _, x in ipairs(a) do
    for _, y in ipairs(b) do
      if x == y or (single(x) and single(y)) then
        return true
      end
    end
  end
  return false
end
-- Read before registering: a daemon that may not lock writes nothing.
local mine = covers(ARGV[1])
local best = 0
local admissions = {}
local r = redis.call('ZRANGE', KEYS[1], 0, -1, 'WITHSCORES')
for i = 1, #r, 2 do
  local m = r[i]
  if string.sub(m, 1, 9) == 'admitted ' then
    local s1 = string.find(m, ' ', 10, true)
    local s2 = s1 and string.find(m, ' ', s1 + 1, true)
    if s2 and string.sub(m, s2 + 1) == ARGV[1] then
      admissions[#admissions + 1] = string.sub(m, 10, s1 - 1) .. ':' .. string.sub(m, s1 + 1, s2 - 1)
    end
  else
    local sc = tonumber(r[i + 1])
    if sc > best and m ~= ARGV[1] and not shares(mine, covers(m)) then
      best = sc
    end
  end
end
local extra = '0'
if ARGV[4] ~= '' then
  extra = redis.call('ZSCORE', KEYS[1], ARGV[4]) or '0'
end
if #admissions > 0 then
  extra = extra .. ' ' .. table.concat(admissions, ' ')
end
if best > 0 and best + tonumber(ARGV[3]) > nowms then
  return reply(0, best, extra)
end
redis.call('ZADD', KEYS[1], 'GT', string.format('%d', nowms + alive), ARGV[1])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', '(' .. string.format('%d', nowms - 86400000))
redis.call('PEXPIRE', KEYS[1], 172800000)
return reply(1, best, extra)
