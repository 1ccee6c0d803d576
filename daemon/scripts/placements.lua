-- The placement registry (daemon/placements.go), after the vote prelude
-- (redlock.NewQuorumScript): register this daemon's layout until now +
-- ARGV[2] ms (a score only ever raised), drop entries a day old, keep the
-- key two days, and read another layout's score.
-- KEYS[1] the registry (a sorted set), KEYS[2..] as in the prelude
-- ARGV[1] this daemon's layout, ARGV[2] ms it may lock on it after now,
-- ARGV[3] the layout to read ('' none; '*' every stable layout but ARGV[1])
-- Returns reply(1, that layout's score or 0: with '*', the highest), or
-- reply(-2, 0) without writing on a master that lost its data.
if not intact then
  return reply(-2, 0)
end
local alive = tonumber(ARGV[2])
redis.call('ZADD', KEYS[1], 'GT', string.format('%d', nowms + alive), ARGV[1])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', '(' .. string.format('%d', nowms - 86400000))
redis.call('PEXPIRE', KEYS[1], 172800000)
if ARGV[3] == '*' then
  local best = 0
  local r = redis.call('ZRANGE', KEYS[1], 0, -1, 'WITHSCORES')
  for i = 1, #r, 2 do
    local sc = tonumber(r[i + 1])
    if r[i] ~= ARGV[1] and string.sub(r[i], 1, 7) == 'stable ' and sc > best then
      best = sc
    end
  end
  return reply(1, best)
end
local s = ARGV[3] ~= '' and redis.call('ZSCORE', KEYS[1], ARGV[3])
return reply(1, s and tonumber(s) or 0)
