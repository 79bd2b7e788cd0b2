#!lua flags=no-writes
-- stats.lua: the sizes of the five states and the age of the oldest unfinished job, in one
-- consistent snapshot by the Redis clock. Read-only.
--
-- KEYS[1] todos   KEYS[2] in_progress   KEYS[3] done   KEYS[4] failed
-- KEYS[5] pending (zset: id -> enqueue time in ms)
-- KEYS[6] scheduled (zset: id -> due time in ms)
-- No ARGV.
-- Returns an array: [todos, in_progress, done, failed, age of the oldest pending job in ms (0 if
-- none), scheduled]
local todos, in_progress, done, failed, pending, scheduled = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6]
-- @include "now_ms"

local now = now_ms()
local oldest = redis.call('ZRANGE', pending, 0, 0, 'WITHSCORES')
local age = 0
if #oldest == 2 then age = math.max(0, now - tonumber(oldest[2])) end
return {
  redis.call('SCARD', todos), redis.call('SCARD', in_progress),
  redis.call('SCARD', done), redis.call('SCARD', failed), age, redis.call('ZCARD', scheduled),
}
