-- The placement registry (daemon/placements.go), after the vote prelude
-- (redlock.NewQuorumScript): register this daemon's layout until now +
-- ARGV[2] ms (a score only ever raised), drop entries a day old, keep the
-- key two days, and read another layout's score.
-- KEYS[1] the registry (a sorted set), KEYS[2..] as in the prelude
-- ARGV[1] this daemon's layout, ARGV[2] ms it may lock on it after now,
-- ARGV[3] the layout to read ('' none; '*' every stable layout that is
-- not this one; a stable layout: the highest score of the members that
-- are it)
-- ARGV[4] (with '*' only; absent: none) ms a lock of another layout may
-- stand after its daemon's registration ended (the max TTL): while another
-- stable layout's score + ARGV[4] is ahead of now, this daemon's layout is
-- not registered here (it grants nothing: daemon/placements.go, "The
-- layout gate")
-- Returns reply(1, that layout's score or 0: with '*', the highest),
-- reply(0, the highest) with ARGV[4] when another stable layout may still
-- hold locks (nothing written), or reply(-2, 0) without writing on a
-- master that lost its data.
if not intact then
  return reply(-2, 0)
end
local alive = tonumber(ARGV[2])
local function register()
  redis.call('ZADD', KEYS[1], 'GT', string.format('%d', nowms + alive), ARGV[1])
  redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', '(' .. string.format('%d', nowms - 86400000))
  redis.call('PEXPIRE', KEYS[1], 172800000)
end
-- stable splits a stable layout "stable <names> @<fingerprint>" into its
-- names and fingerprint ('' for a member without one: a daemon of an
-- earlier version); nil for any other member.
local function stable(layout)
  if string.sub(layout, 1, 7) ~= 'stable ' then
    return nil
  end
  local rest = string.sub(layout, 8)
  local at = string.find(rest, ' @', 1, true)
  if at then
    return string.sub(rest, 1, at - 1), string.sub(rest, at + 2)
  end
  return rest, ''
end
-- same reports whether two stable layouts lock on the same masters: the
-- same masters (fingerprints equal, or one unknown) under the same names,
-- or under any names when both are one group (a former masters list is
-- "default": every key on the same masters, the same counters and
-- records; they do not exclude each other).
local function same(an, af, bn, bf)
  if af ~= '' and bf ~= '' and af ~= bf then
    return false
  end
  if an == bn then
    return true
  end
  return not string.find(an, ',', 1, true) and not string.find(bn, ',', 1, true)
end
local r = redis.call('ZRANGE', KEYS[1], 0, -1, 'WITHSCORES')
if ARGV[3] == '*' then
  -- Read before registering: a daemon that may not lock writes nothing.
  local best = 0
  local mn, mf = stable(ARGV[1])
  for i = 1, #r, 2 do
    local sc = tonumber(r[i + 1])
    local n, f = stable(r[i])
    if r[i] ~= ARGV[1] and n and not (mn and same(mn, mf, n, f)) and sc > best then
      best = sc
    end
  end
  if ARGV[4] and best > 0 and best + tonumber(ARGV[4]) > nowms then
    return reply(0, best)
  end
  register()
  return reply(1, best)
end
register()
local best = 0
local wn, wf = nil, nil
if ARGV[3] ~= '' then
  wn, wf = stable(ARGV[3])
end
if wn then
  -- The members that are that layout: its names exactly (a moving
  -- daemon reads its previous groups), its masters or unknown ones.
  for i = 1, #r, 2 do
    local n, f = stable(r[i])
    if n == wn and (f == '' or wf == '' or f == wf) then
      best = math.max(best, tonumber(r[i + 1]))
    end
  end
elseif ARGV[3] ~= '' then
  local s = redis.call('ZSCORE', KEYS[1], ARGV[3])
  best = s and tonumber(s) or 0
end
return reply(1, best)
