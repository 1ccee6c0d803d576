-- The statistics reading a lane appends after a pipelined batch of votes
-- (redlock/batchstats.go) on a master that does not answer one INFO server
-- stats command with server_time_usec in it (before Redis 7.0; newer ones
-- get that command instead): this master's TIME and INFO stats, in one
-- atomic step. Returned whole ({sec, usec, INFO stats text}); the client parses
-- the two fields it needs, which costs the master less than string.match.
-- No shebang and no writes: it runs under OOM like the status vote (a
-- MULTI around TIME and INFO would be refused there).
local t = redis.call('TIME')
return {t[1], t[2], redis.call('INFO', 'stats')}
