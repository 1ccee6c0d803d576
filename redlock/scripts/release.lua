-- Compare-and-delete: remove the lock only if it still holds this token,
-- and tell the waiters (Client.Acquire with WithWait, in every daemon) that
-- it is free.
-- KEYS[1] lock key, KEYS[2] the lock's fence record (fence.lua; absent when
-- fencing is off), deleted with the lock, KEYS[3] the lock's delay record
-- (redlock/lockdelay.go; absent when lock-delay is off), deleted with the
-- lock, and also when the lock already expired: the holder that releases
-- late ends its delay
-- ARGV[1] token, ARGV[2] release channel (absent: no notification; a
-- failed acquire's clean-up notifies too, redlock/acquire.go cleanup),
-- ARGV[3] the release's id (with ARGV[2]; 16 characters, from the token:
-- redlock/wait.go releaseID)
-- Publishes the id, then the key, when it deletes the lock or, after the
-- lock expired, its delay record: every master that does so publishes the
-- same message, and a waiter tells the copies of one
-- release from a new one (redlock/wait.go releaseMessage).
-- Returns 1 deleted, 0 absent (expired or released), -1 held by another token.
-- pcall: a key of another type under the lock's name (a hash the user keeps
-- there) is held by another, not an error that reads as a failed master
-- (a release answered so was kept and sent again every health round).
-- redis.pcall runs the command as redis.call does; only an error differs.
local v = redis.pcall('GET', KEYS[1])
if type(v) == 'table' then
  return -1
end
if v == ARGV[1] then
  redis.call('DEL', unpack(KEYS))
  if ARGV[2] then
    redis.call('PUBLISH', ARGV[2], ARGV[3] .. KEYS[1])
  end
  return 1
end
if v then
  return -1
end
if KEYS[3] and redis.call('GET', KEYS[3]) == ARGV[1] then
  -- With the fence record kept for the delay (fence.lua), when it is ours.
  local f = redis.call('GET', KEYS[2])
  local sp = f and string.find(f, ' ', 1, true)
  if sp and string.sub(f, sp + 1) == ARGV[1] then
    redis.call('DEL', KEYS[2], KEYS[3])
  else
    redis.call('DEL', KEYS[3])
  end
  -- The key is free from now on: the waiters its delay refused are told,
  -- as after a release in time.
  if ARGV[2] then
    redis.call('PUBLISH', ARGV[2], ARGV[3] .. KEYS[1])
  end
end
return 0
