-- release.lua for a multi-key lock: compare-and-delete every key of the
-- set that holds this token, with its fence and delay records, and tell
-- the waiters of each key that it is free.
-- KEYS ARGV[2] keys per lock key: the lock key, its fence record[, its
-- delay record], for every key of the set
-- ARGV[1] token, ARGV[2] keys per lock key, ARGV[3] release channel
-- (absent: no notification, for the clean-up after a failed acquire),
-- ARGV[4] the release's id (with ARGV[3]); each key's message is the id
-- and the key (release.lua)
-- Returns 1 when some key held this token (all such were deleted), -1 when
-- none did and another token holds one, 0 when none is held.
local stride = tonumber(ARGV[2])
local deleted, foreign = 0, 0
for i = 1, #KEYS, stride do
  local v = redis.pcall('GET', KEYS[i])
  if type(v) == 'table' then
    v = '' -- a key of another type: held, not by this token (release.lua)
  end
  if v == ARGV[1] then
    redis.call('DEL', unpack(KEYS, i, i + stride - 1))
    if ARGV[3] then
      redis.call('PUBLISH', ARGV[3], ARGV[4] .. KEYS[i])
    end
    deleted = deleted + 1
  elseif v then
    foreign = foreign + 1
  elseif stride == 3 and redis.call('GET', KEYS[i + 2]) == ARGV[1] then
    -- Released late: the holder ends its delay, and the fence record kept
    -- with it when it is ours (release.lua).
    local f = redis.call('GET', KEYS[i + 1])
    local sp = f and string.find(f, ' ', 1, true)
    if sp and string.sub(f, sp + 1) == ARGV[1] then
      redis.call('DEL', KEYS[i + 1], KEYS[i + 2])
    else
      redis.call('DEL', KEYS[i + 2])
    end
    -- The key is free from now on: its waiters are told (release.lua).
    if ARGV[3] then
      redis.call('PUBLISH', ARGV[3], ARGV[4] .. KEYS[i])
    end
  end
end
if deleted > 0 then
  return 1
end
if foreign > 0 then
  return -1
end
return 0
