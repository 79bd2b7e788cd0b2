#!lua flags=no-writes
-- stats.lua: the sizes of the five states, todos per priority, and the age of the oldest unfinished
-- job, in one consistent snapshot by the Redis clock. Read-only, so it also reads a queue whose
-- layout is from before 0.3 (see includes/layout.lua) without adopting it.
--
-- KEYS[1] todos   KEYS[2] in_progress   KEYS[3] done   KEYS[4] failed
-- KEYS[5] pending (zset: id -> enqueue time in ms)
-- KEYS[6] scheduled (zset: id -> due time in ms)
-- KEYS[7] legacy_todos (set: todos of a queue written before 0.3)
-- No ARGV.
-- Returns an array: [todos, in_progress, done, failed, age of the oldest pending job in ms (0 if
-- none), scheduled], then priority, number of jobs in todos for each priority that has any, highest
-- priority first
local todos, in_progress, done, failed, pending, scheduled = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6]
local legacy_todos = KEYS[7]
-- @include "now_ms"
-- @include "rank"

local now = now_ms()
local oldest = redis.call('ZRANGE', pending, 0, 0, 'WITHSCORES')
local age = 0
if #oldest == 2 then age = math.max(0, now - tonumber(oldest[2])) end
-- Until the layout is adopted todos and in_progress are sets; their jobs count as priority 0.
local ordered = redis.call('TYPE', todos)['ok'] ~= 'set'
local unordered, queued = redis.call('SCARD', legacy_todos), 0
if ordered then queued = redis.call('ZCARD', todos) else unordered = unordered + redis.call('SCARD', todos) end
local running
if redis.call('TYPE', in_progress)['ok'] == 'set' then
  running = redis.call('SCARD', in_progress)
else
  running = redis.call('ZCARD', in_progress)
end
local reply = {
  queued + unordered, running,
  redis.call('SCARD', done), redis.call('SCARD', failed), age, redis.call('ZCARD', scheduled),
}
for priority = TOP_PRIORITY, -TOP_PRIORITY, -1 do
  local count = 0
  if ordered then
    local lowest = rank_of(priority, 0)
    count = redis.call('ZCOUNT', todos, lowest, lowest + RANK_BAND - 1)
  end
  if priority == 0 then count = count + unordered end
  if count > 0 then
    reply[#reply + 1] = priority
    reply[#reply + 1] = count
  end
end
return reply
