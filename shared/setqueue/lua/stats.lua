#!lua flags=no-writes
-- stats.lua: the sizes of the five states, todos per priority, and the age of the oldest unfinished
-- job, in one consistent snapshot by the Redis clock.
--
-- KEYS[1] todos   KEYS[2] in_progress   KEYS[3] done   KEYS[4] failed
-- KEYS[5] pending (zset: id -> enqueue time in ms)
-- KEYS[6] scheduled (zset: id -> due time in ms)
-- KEYS[7] cancelled (set: cancelled ids)
-- KEYS[8] results   (hash: id -> a done job's result)
-- No ARGV.
-- Returns an array: [todos, in_progress, done, failed, age of the oldest pending job in ms (0 if
-- none), scheduled, cancelled, results kept], then priority, number of jobs in todos for each priority that
-- has any, highest
-- priority first
local todos, in_progress, done, failed, pending, scheduled = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6]
local cancelled, results = KEYS[7], KEYS[8]
-- @include "now_ms"
-- @include "rank"

local now = now_ms()
local oldest = redis.call('ZRANGE', pending, 0, 0, 'WITHSCORES')
local age = 0
if #oldest == 2 then age = math.max(0, now - tonumber(oldest[2])) end
local reply = {
  redis.call('ZCARD', todos), redis.call('ZCARD', in_progress),
  redis.call('SCARD', done), redis.call('SCARD', failed), age, redis.call('ZCARD', scheduled),
  redis.call('SCARD', cancelled), redis.call('HLEN', results),
}
for priority = TOP_PRIORITY, -TOP_PRIORITY, -1 do
  local lowest = rank_of(priority, 0)
  local count = redis.call('ZCOUNT', todos, lowest, lowest + RANK_BAND - 1)
  if count > 0 then
    reply[#reply + 1] = priority
    reply[#reply + 1] = count
  end
end
return reply
