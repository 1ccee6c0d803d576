-- Read one master's copy of an idempotency record. Follows vote_prelude.lua.
-- KEYS[1] record key, KEYS[2..] as in the prelude.
-- Returns the prelude's reply with code
--    1  the record is here; value = its PTTL (ms); extra = cjson of HGETALL
--    0  no record here
--   -2  this master lost its data: its answer says nothing
if not intact then
  return reply(-2, 0)
end
local f = redis.call('HGETALL', KEYS[1])
if #f == 0 then
  return reply(0, 0)
end
return reply(1, redis.call('PTTL', KEYS[1]), cjson.encode(f))
