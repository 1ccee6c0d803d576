-- Write a fencing token back: raise the counter to ARGV[2] (never lower it),
-- but only where this token still holds the lock, so a write-back can never
-- outlive or outrun the acquire it belongs to.
-- KEYS[1] lock key, KEYS[2] fencing counter
-- ARGV[1] token, ARGV[2] fencing token
-- Returns 1 written (or already ≥), 0 the lock is not held by this token.
if redis.call('GET', KEYS[1]) ~= ARGV[1] then
  return 0
end
local cur = tonumber(redis.call('GET', KEYS[2]) or '0')
if cur < tonumber(ARGV[2]) then
  redis.call('SET', KEYS[2], ARGV[2])
end
return 1
