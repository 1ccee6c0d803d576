-- The placement registry (daemon/placements.go), after the vote prelude
-- (redlock.NewQuorumScript): register this daemon's layout until now +
-- ARGV[2] ms (a score only ever raised), drop entries a day old, keep the
-- key two days, and read another layout's score.
-- KEYS[1] the registry (a sorted set), KEYS[2..] as in the prelude
-- ARGV[1] this daemon's layout, ARGV[2] ms it may lock on it after now,
-- ARGV[3] the layout to read ('' none; '*' every stable layout but ARGV[1])
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
-- single: a stable layout of one group. Two of them registered here are
-- this group under two names (a former masters list is "default"): every
-- key on the same masters, the same counters and records; they do not
-- exclude each other.
local function single(layout)
  return string.sub(layout, 1, 7) == 'stable ' and not string.find(layout, ',', 8, true)
end
if ARGV[3] == '*' then
  -- Read before registering: a daemon that may not lock writes nothing.
  local best = 0
  local mine = single(ARGV[1])
  local r = redis.call('ZRANGE', KEYS[1], 0, -1, 'WITHSCORES')
  for i = 1, #r, 2 do
    local sc = tonumber(r[i + 1])
    if r[i] ~= ARGV[1] and string.sub(r[i], 1, 7) == 'stable ' and not (mine and single(r[i])) and sc > best then
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
local s = ARGV[3] ~= '' and redis.call('ZSCORE', KEYS[1], ARGV[3])
return reply(1, s and tonumber(s) or 0)
