#!lua flags=no-writes
-- stats.lua: the sizes of the four sets and the age of the oldest unfinished job, in one
-- consistent snapshot by the Redis clock. Read-only.
--
-- KEYS[1] todos   KEYS[2] in_progress   KEYS[3] done   KEYS[4] failed
-- KEYS[5] pending (zset: id -> enqueue time in ms)
-- Returns an array: [todos, in_progress, done, failed, age of the oldest pending job in ms (0 if none)]
local t = redis.call('TIME')
local now = t[1] * 1000 + math.floor(t[2] / 1000)
local oldest = redis.call('ZRANGE', KEYS[5], 0, 0, 'WITHSCORES')
local age = 0
if #oldest == 2 then age = math.max(0, now - tonumber(oldest[2])) end
return {
  redis.call('SCARD', KEYS[1]), redis.call('SCARD', KEYS[2]),
  redis.call('SCARD', KEYS[3]), redis.call('SCARD', KEYS[4]), age,
}
