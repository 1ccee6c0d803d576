-- Acquire one master's vote (Redis Redlock page, step 2), and report this
-- master's fencing counter with the vote.
-- KEYS[1] lock key, KEYS[2] fencing counter (absent when fencing is off)
-- ARGV[1] token (random, 32 hex chars), ARGV[2] TTL in milliseconds
-- Returns {1, counter} when the key was set for this token,
--         {0, pttl} when another token holds it (pttl: its remaining milliseconds).
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  local counter = 0
  if KEYS[2] then
    counter = tonumber(redis.call('GET', KEYS[2]) or '0')
  end
  return {1, counter}
end
return {0, redis.call('PTTL', KEYS[1])}
