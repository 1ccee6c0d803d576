-- Raise a counter to at least ARGV[1] (max-assign). Used to repair the
-- fencing counter of a master that lost its data from a quorum read.
-- KEYS[1] fencing counter; ARGV[1] value
-- Returns the counter after the repair.
local cur = tonumber(redis.call('GET', KEYS[1]) or '0')
local v = tonumber(ARGV[1])
if cur < v then
  redis.call('SET', KEYS[1], ARGV[1])
  return v
end
return cur
