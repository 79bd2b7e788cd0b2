#!lua flags=no-writes
-- stats.lua: the sizes of the six states, todos per priority, the age of the oldest unfinished
-- job, and the queue's flow control (paused, its groups), in one consistent snapshot by the Redis
-- clock.
--
-- KEYS[1] todos   KEYS[2] in_progress   KEYS[3] done   KEYS[4] failed
-- KEYS[5] pending (zset: id -> enqueue time in ms)
-- KEYS[6] scheduled (zset: id -> due time in ms)
-- KEYS[7] cancelled (set: cancelled ids)
-- KEYS[8] results   (hash: id -> a done job's result)
-- KEYS[9] grouped   (zset: id -> rank of the waiting jobs that have a group; with todos, the todos state)
-- KEYS[10] flow     KEYS[11] groups_ready   KEYS[12] groups_resting   KEYS[13] groups_full
-- KEYS[14] group_running  (see includes/groups.lua)
-- No ARGV.
-- Returns an array: [todos (with a group or not), in_progress, done, failed, age of the oldest
-- pending job in ms (0 if none), scheduled, cancelled, results kept, 1 if paused else 0, waiting
-- jobs that have a group, groups with jobs waiting, of which resting, of which full, groups with
-- jobs in progress], then priority, number of jobs in todos for each priority that has any,
-- highest priority first
local todos, in_progress, done, failed, pending, scheduled = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6]
local cancelled, results, grouped, flow = KEYS[7], KEYS[8], KEYS[9], KEYS[10]
local groups_ready, groups_resting, groups_full, group_running = KEYS[11], KEYS[12], KEYS[13], KEYS[14]
-- @include "now_ms"
-- @include "rank"

local now = now_ms()
local oldest = redis.call('ZRANGE', pending, 0, 0, 'WITHSCORES')
local age = 0
if #oldest == 2 then age = math.max(0, now - tonumber(oldest[2])) end
local with_group = redis.call('ZCARD', grouped)
local ready = redis.call('ZCARD', groups_ready)
if redis.call('ZSCORE', groups_ready, '') then ready = ready - 1 end  -- the turn of the jobs without a group
local resting, full = redis.call('ZCARD', groups_resting), redis.call('SCARD', groups_full)
local reply = {
  redis.call('ZCARD', todos) + with_group, redis.call('ZCARD', in_progress),
  redis.call('SCARD', done), redis.call('SCARD', failed), age, redis.call('ZCARD', scheduled),
  redis.call('SCARD', cancelled), redis.call('HLEN', results),
  redis.call('HEXISTS', flow, 'paused'), with_group, ready + resting + full, resting, full,
  redis.call('HLEN', group_running),
}
for priority = TOP_PRIORITY, -TOP_PRIORITY, -1 do
  local lowest = rank_of(priority, 0)
  local count = redis.call('ZCOUNT', todos, lowest, lowest + RANK_BAND - 1)
  if with_group > 0 then count = count + redis.call('ZCOUNT', grouped, lowest, lowest + RANK_BAND - 1) end
  if count > 0 then
    reply[#reply + 1] = priority
    reply[#reply + 1] = count
  end
end
return reply
