-- The layout gate's fence jump (daemon/placements.go, jumpFences), after
-- the vote prelude (redlock.NewQuorumScript): read this master's fencing
-- counter, and with ARGV[1] raise it to at least ARGV[1] (max-assign).
-- KEYS[1] the placement registry (for the lane only), KEYS[2..] as in the
-- prelude (KEYS[4] the fencing counter; absent when fencing is off)
-- ARGV[1] the target, or '' to read only
-- Returns reply(1, the counter after: -1 when fencing is off), or
-- reply(-2, 0) without writing on a master that lost its data.
if not intact then
  return reply(-2, 0)
end
if ARGV[1] ~= '' and KEYS[4] then
  local v = tonumber(ARGV[1])
  if counter < v then
    redis.call('SET', KEYS[4], ARGV[1])
    counter = v
  end
end
return reply(1, counter)
