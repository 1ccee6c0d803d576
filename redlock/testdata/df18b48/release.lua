-- Compare-and-delete: remove the lock only if it still holds this token.
-- KEYS[1] lock key; ARGV[1] token
-- Returns 1 deleted, 0 absent (expired or released), -1 held by another token.
local v = redis.call('GET', KEYS[1])
if v == ARGV[1] then
  redis.call('DEL', KEYS[1])
  return 1
end
if v then
  return -1
end
return 0
