-- The placement registry (daemon/placements.go), after the vote prelude
-- (redlock.NewQuorumScript): register this daemon's layout until now +
-- ARGV[2] ms (a score only ever raised), drop entries a day old, keep the
-- key two days, and read another layout's score.
-- KEYS[1] the registry (a sorted set), KEYS[2..] as in the prelude
-- ARGV[1] this daemon's layout, ARGV[2] ms it may lock on it after now,
-- ARGV[3] the layout to read ('' none)
-- Returns reply(1, that layout's score or 0), or reply(-2, 0) without
-- writing on a master that lost its data.
if not intact then
  return reply(-2, 0)
end
local alive = tonumber(ARGV[2])
redis.call('ZADD', KEYS[1], 'GT', string.format('%d', nowms + alive), ARGV[1])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', '(' .. string.format('%d', nowms - 86400000))
redis.call('PEXPIRE', KEYS[1], 172800000)
local s = ARGV[3] ~= '' and redis.call('ZSCORE', KEYS[1], ARGV[3])
return reply(1, s and tonumber(s) or 0)
