#!lua
-- progress.lua: keep a running job's progress (with the Redis time) if the caller's claim still
-- owns it. No allow-oom: a report only adds to memory; Queue.progress drops a refused one.
-- KEYS[1] owners KEYS[2] progress ("<fraction>|<ms>|<message>")
-- ARGV[1] id ARGV[2] token ARGV[3] fraction (0..1) ARGV[4] message ("" none)
-- Returns 1 when kept, 0 when the claim no longer owns the job
local owners, progress = KEYS[1], KEYS[2]
local id, token, fraction, message = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
-- @include "now_ms"

if redis.call('HGET', owners, id) ~= token then return 0 end
redis.call('HSET', progress, id, fraction .. '|' .. now_ms() .. '|' .. message)
return 1
