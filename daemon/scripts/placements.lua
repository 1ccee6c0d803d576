-- The placement registry (daemon/placements.go), after the vote prelude
-- (redlock.NewQuorumScript): read the registrations of the layouts that may
-- not lock beside this daemon's, and unless a lock one of them granted may
-- still stand, register this daemon's layout until now + ARGV[2] ms (a
-- score only ever raised), with this daemon's max TTL; drop entries a day
-- old, keep the key two days.
-- KEYS[1] the registry (a sorted set), KEYS[2..] as in the prelude
-- ARGV[1] this daemon's layout, ARGV[2] ms it may lock on it after now,
-- ARGV[3] the longest max TTL registered on the masters (ms): how long a
-- lock of a daemon that records no max TTL of its own (an earlier version)
-- may stand after its registration ended,
-- ARGV[4] a layout whose score to read too ('' none: a moving daemon reads
-- its previous groups', step 2's end),
-- ARGV[5] this daemon's own max TTL (ms).
-- Members:
--   "<layout>"                  score: until when a daemon on it may lock
--   "admitted max_ttl <b> of <layout>"  score: the same, for the daemons on
--       it whose max TTL is b ms: a lock they granted stands until score + b
--       at the latest. A daemon on another layout is held off by its own
--       layout's bound, not by the longest max TTL any client registered (a
--       black-box pass: one replica started with the default max_ttl, a
--       day, beside daemons with 15 s shut every daemon whose layout
--       differed from a stopped one's for a day). The "admitted " prefix
--       keeps the daemons of the version before it, which read every other
--       member as a layout, from taking it for one: they skip admissions
--       not of their layout;
--   "admitted <K> <b> <layout>"  an admission (placements_admit.lua).
-- A layout whose "<layout>" score is above every bound of its own was last
-- registered by a daemon that records none: it is bounded by ARGV[3], as
-- before bounds were recorded; and a daemon that registers over such a
-- registration of its own layout keeps it as a bound of ARGV[3] first, so
-- that the earlier daemon's locks stay bounded once its score is raised.
-- Returns reply(1, the latest registration end of the layouts that may not
-- lock beside this one or 0, extra) having registered, reply(0, that, extra)
-- when a lock one of them granted may still stand (nothing written), or
-- reply(-2, 0) without writing on a master that lost its data; extra is
-- ARGV[4]'s score or 0, then the time until which such a lock may stand
-- (ms, 0 none), then "<K>:<b>" for each admission of ARGV[1] here,
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
local longest = tonumber(ARGV[3])
local best, free = 0, 0
local plain = {}   -- layout -> its registration's score
local bounded = {} -- layout -> the latest score among its bounds
local admissions = {}
local function other(layout)
  return layout ~= ARGV[1] and not shares(mine, covers(layout))
end
local r = redis.call('ZRANGE', KEYS[1], 0, -1, 'WITHSCORES')
for i = 1, #r, 2 do
  local m, sc = r[i], tonumber(r[i + 1])
  if string.sub(m, 1, 17) == 'admitted max_ttl ' then
    local sp = string.find(m, ' ', 18, true)
    local b = sp and tonumber(string.sub(m, 18, sp - 1))
    if b and string.sub(m, sp + 1, sp + 3) == 'of ' then
      local layout = string.sub(m, sp + 4)
      bounded[layout] = math.max(bounded[layout] or 0, sc)
      if other(layout) then
        free = math.max(free, sc + b)
      end
    end
  elseif string.sub(m, 1, 9) == 'admitted ' then
    local s1 = string.find(m, ' ', 10, true)
    local s2 = s1 and string.find(m, ' ', s1 + 1, true)
    if s2 and string.sub(m, s2 + 1) == ARGV[1] then
      admissions[#admissions + 1] = string.sub(m, 10, s1 - 1) .. ':' .. string.sub(m, s1 + 1, s2 - 1)
    end
  else
    plain[m] = sc
  end
end
for m, sc in pairs(plain) do
  if other(m) then
    best = math.max(best, sc)
    if sc > (bounded[m] or 0) then
      free = math.max(free, sc + longest)
    end
  end
end
local extra = '0'
if ARGV[4] ~= '' then
  extra = redis.call('ZSCORE', KEYS[1], ARGV[4]) or '0'
end
extra = extra .. ' ' .. string.format('%d', free)
if #admissions > 0 then
  extra = extra .. ' ' .. table.concat(admissions, ' ')
end
if free > nowms then
  return reply(0, best, extra)
end
local prev = plain[ARGV[1]]
if prev and prev > (bounded[ARGV[1]] or 0) then
  redis.call('ZADD', KEYS[1], 'GT', string.format('%d', prev), 'admitted max_ttl ' .. string.format('%d', longest) .. ' of ' .. ARGV[1])
end
local until_ms = string.format('%d', nowms + alive)
redis.call('ZADD', KEYS[1], 'GT', until_ms, ARGV[1])
redis.call('ZADD', KEYS[1], 'GT', until_ms, 'admitted max_ttl ' .. ARGV[5] .. ' of ' .. ARGV[1])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', '(' .. string.format('%d', nowms - 86400000))
redis.call('PEXPIRE', KEYS[1], 172800000)
return reply(1, best, extra)
