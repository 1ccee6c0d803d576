-- The statistics reading a lane appends after a pipelined batch of votes
-- (redlock/batchstats.go) on a master whose INFO server has no
-- server_time_usec (before Redis 6.2; newer ones get one INFO server stats
-- command instead): this master's TIME and INFO stats, in one atomic step. Returned whole ({sec, usec, INFO stats text}); the client parses
-- the two fields it needs, which costs the master less than string.match.
-- No shebang and no writes: it runs under OOM like the status vote (a
-- MULTI around TIME and INFO would be refused there).
local t = redis.call('TIME')
return {t[1], t[2], redis.call('INFO', 'stats')}
