-- Opening shared by the extend scripts (extend.lua, extend_multi.lua),
-- after vote_prelude.lua: the records a restore writes back
-- (redlock/extend.go restoreCopies).
-- keepRecord writes a record key k as value v for ms milliseconds where it
-- is missing or this token's (ARGV[1]: a fence record "<fence> <token>"
-- ends with it, a delay record is it), never shortening it; another
-- holder's record is left as it is.
local function keepRecord(k, v, ms)
  local cur = redis.call('GET', k)
  if cur and cur ~= ARGV[1] and string.sub(cur, -#ARGV[1] - 1) ~= ' ' .. ARGV[1] then
    return
  end
  if not cur or redis.call('PTTL', k) < ms then
    redis.call('SET', k, v, 'PX', ms)
  end
end
