#!lua
-- progress.lua: what a running job's handler says of its progress, kept (with the time, by the
-- Redis clock) for inspect and the console, if the caller's claim still owns the job: a late
-- report from a lease that was lost changes nothing. Refused whole when Redis is full: a report
-- only adds to memory, and Queue.progress drops a refused one (the job goes on).
--
-- KEYS[1] owners     (hash: id -> lease token of its current claim)
-- KEYS[2] progress   (hash: id -> "<fraction>|<ms>|<message>")
-- ARGV[1] id         the job
-- ARGV[2] token      the caller's claim
-- ARGV[3] fraction   from 0 to 1
-- ARGV[4] message    free text ("" for none)
-- Returns 1 when kept, 0 when the claim no longer owns the job
local owners, progress = KEYS[1], KEYS[2]
local id, token, fraction, message = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
-- @include "now_ms"

if redis.call('HGET', owners, id) ~= token then return 0 end
redis.call('HSET', progress, id, fraction .. '|' .. now_ms() .. '|' .. message)
return 1
