-- An admission of the placement registry (daemon/placements.go, admit),
-- after the vote prelude (redlock.NewQuorumScript), on the admitted master
-- only: a daemon on layout L admitted this master, repaired at K, with the
-- max TTL b. Later daemons on L (a restart) count it as that daemon did
-- instead of waiting until K + a registration's life + b.
-- KEYS[1] the registry (a sorted set), KEYS[2..] as in the prelude
-- ARGV[1] the member "admitted <K unix ms> <b ms> <layout>", ARGV[2] its
-- score: when it no longer matters (unix ms: K + a registration's life + b)
-- Returns reply(1, 0) written, or reply(-2, 0) without writing on a master
-- that lost its data.
if not intact then
  return reply(-2, 0)
end
redis.call('ZADD', KEYS[1], 'GT', ARGV[2], ARGV[1])
return reply(1, 0)
