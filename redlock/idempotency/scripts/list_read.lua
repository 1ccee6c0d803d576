-- Read one master's copy of an idempotency record for a listing: read.lua
-- without the stored answer, which a listing does not show (only its size
-- and status, written with it by complete: write.lua's 'asz' and 'ast').
-- A record of an older client, without them, has its answer read as
-- read.lua does. Follows vote_prelude.lua.
-- KEYS[1] record key, KEYS[2..] as in the prelude.
-- Returns the prelude's reply with code
--    1  the record is here; value = its PTTL (ms); extra = cjson of its
--       fields as name, value pairs, 'ans' only where 'asz' is missing
--    0  no record here
--   -2  this master lost its data: its answer says nothing
if not intact then
  return reply(-2, 0)
end
local names = {'fp', 'st', 'tok', 'fence', 'att', 't0', 'tc', 'ret', 'asz', 'ast'}
-- HGET field by field, not HMGET: the masters' least-privilege ACL user
-- (docs/operations.md) allows HGET and HGETALL only.
local v = {}
local flat = {}
for i, n in ipairs(names) do
  v[i] = redis.call('HGET', KEYS[1], n)
  if v[i] then
    flat[#flat + 1] = n
    flat[#flat + 1] = v[i]
  end
end
if #flat == 0 then
  return reply(0, 0)
end
if v[2] == 'COMPLETED' and not v[9] then
  local ans = redis.call('HGET', KEYS[1], 'ans')
  if ans then
    flat[#flat + 1] = 'ans'
    flat[#flat + 1] = ans
  end
end
return reply(1, redis.call('PTTL', KEYS[1]), cjson.encode(flat))
