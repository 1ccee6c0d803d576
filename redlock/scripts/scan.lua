-- One SCAN step of Client.List, on a master that still has the
-- deployment's marker (a master that lost its data may have lost locks:
-- its keyspace says nothing about what is held).
-- KEYS[1] marker
-- ARGV[1] SCAN cursor, ARGV[2] MATCH pattern, ARGV[3] COUNT
-- Returns SCAN's reply {next cursor, {keys}}, or -2 when the marker is missing.
if redis.call('EXISTS', KEYS[1]) == 0 then
  return -2
end
return redis.call('SCAN', ARGV[1], 'MATCH', ARGV[2], 'COUNT', ARGV[3])
