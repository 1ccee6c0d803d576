-- One SCAN step of Store.List on one master. Follows vote_prelude.lua.
-- KEYS[1] the MATCH pattern (a pattern, not a key: it only picks the lane),
-- KEYS[2..] as in the prelude.
-- ARGV[1] SCAN cursor, ARGV[2] COUNT
-- Returns the prelude's reply with code
--    1  value = the next cursor (0: done), extra = cjson of the keys found
--   -2  this master lost its data: its keyspace says nothing
if not intact then
  return reply(-2, 0)
end
local r = redis.call('SCAN', ARGV[1], 'MATCH', KEYS[1], 'COUNT', ARGV[2])
if #r[2] == 0 then
  return reply(1, tonumber(r[1]), '[]')
end
return reply(1, tonumber(r[1]), cjson.encode(r[2]))
