-- Record this daemon's count in one bucket of an account's shared call
-- counter, and read every daemon's. The counter is a G-counter: each daemon
-- owns one field and only ever raises it to its own absolute count, so a
-- write that reaches a master late, twice, or after a later one neither
-- counts a call twice nor loses one.
-- KEYS[1] the bucket's hash (<prefix>quota:… or <prefix>rate:…)
-- ARGV[1] this daemon's id
-- ARGV[2] this daemon's calls in the bucket so far (0: only read)
-- ARGV[3] how long the bucket lives from now, in milliseconds
-- ARGV[4], ARGV[5], ... pairs of another daemon's id and its count, raised
--   the same way: calls of other daemons that a reload carried into a
--   bucket of a new window length (daemon/limits: accountState.carried)
-- Returns the hash as {id1, count1, id2, count2, ...}.
local raised = false
local function raise(id, n)
  if n > 0 then
    local cur = tonumber(redis.call('HGET', KEYS[1], id) or '0')
    if n > cur then
      redis.call('HSET', KEYS[1], id, n)
      raised = true
    end
  end
end
raise(ARGV[1], tonumber(ARGV[2]))
for i = 4, #ARGV - 1, 2 do
  raise(ARGV[i], tonumber(ARGV[i + 1]))
end
if raised then
  redis.call('PEXPIRE', KEYS[1], ARGV[3])
end
return redis.call('HGETALL', KEYS[1])
