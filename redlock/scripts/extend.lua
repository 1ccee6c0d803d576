-- Compare-and-PEXPIRE: extend the lock only if it still holds this token.
-- It never revives an expired key and never touches another owner's key.
-- KEYS[1] lock key; ARGV[1] token, ARGV[2] new TTL in milliseconds
-- Returns 1 extended, 0 absent (expired or released), -1 held by another token.
local v = redis.call('GET', KEYS[1])
if v == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return 1
end
if v then
  return -1
end
return 0
