-- Acquire one master's vote (Redis Redlock page, step 2).
-- KEYS[1] lock key
-- ARGV[1] token (random, 32 hex chars), ARGV[2] TTL in milliseconds
-- Returns {1, 0} when the key was set for this token,
--         {0, pttl} when another token holds it (pttl: its remaining milliseconds).
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  return {1, 0}
end
return {0, redis.call('PTTL', KEYS[1])}
