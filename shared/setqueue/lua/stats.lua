#!lua flags=no-writes
-- stats.lua: one snapshot of the queue's figures by the Redis clock.
-- KEYS[1] todos KEYS[2] in_progress KEYS[3] done KEYS[4] failed KEYS[5] pending KEYS[6] scheduled
-- KEYS[7] cancelled KEYS[8] results KEYS[9] grouped (waiting jobs with a group: part of todos)
-- KEYS[10] limits KEYS[11] groups_ready KEYS[12] groups_resting KEYS[13] groups_full KEYS[14] group_running
-- KEYS[15] waiting KEYS[16] released
-- No ARGV.
-- Returns an array: [todos (grouped too), in_progress, done, failed, oldest pending age ms (0:
-- none), scheduled, cancelled, results kept, waiting, releases recorded (released's jobs, still in
-- waiting: drain.lua moves them), paused 1/0, grouped waiting, groups waiting, resting, full,
-- running], then priority, todos count, per non-empty priority, highest first
local todos, in_progress, done, failed, pending, scheduled = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6]
local cancelled, results, grouped, limits = KEYS[7], KEYS[8], KEYS[9], KEYS[10]
local groups_ready, groups_resting, groups_full, group_running = KEYS[11], KEYS[12], KEYS[13], KEYS[14]
local waiting, released = KEYS[15], KEYS[16]
-- @include "now_ms"
-- @include "rank"

local now = now_ms()
local oldest = redis.call('ZRANGE', pending, 0, 0, 'WITHSCORES')
local age = 0
if #oldest == 2 then age = math.max(0, now - tonumber(oldest[2])) end
local with_group = redis.call('ZCARD', grouped)
local ready = redis.call('ZCARD', groups_ready)
if redis.call('ZSCORE', groups_ready, '') then ready = ready - 1 end  -- the ungrouped jobs' turn
local resting, full = redis.call('ZCARD', groups_resting), redis.call('SCARD', groups_full)
local reply = {
  redis.call('ZCARD', todos) + with_group, redis.call('ZCARD', in_progress),
  redis.call('SCARD', done), redis.call('SCARD', failed), age, redis.call('ZCARD', scheduled),
  redis.call('SCARD', cancelled), redis.call('HLEN', results), redis.call('ZCARD', waiting), redis.call('LLEN', released) / 2,
  redis.call('HEXISTS', limits, 'paused'), with_group, ready + resting + full, resting, full,
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
