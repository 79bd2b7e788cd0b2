#!lua flags=no-writes
-- list_groups.lua: the job groups of a queue with jobs waiting or in progress, in one snapshot:
-- each with its jobs waiting and in progress and where it stands (ready: takes its turn; resting:
-- its rate is used up; full: its concurrency is in progress; idle: nothing waiting). At most
-- ARGV[1] groups, those in the line of groups first (in turn order), then the resting, the full,
-- and those with jobs in progress only.
--
-- KEYS[1] group_lines   KEYS[2] groups_ready   KEYS[3] groups_resting   KEYS[4] groups_full
-- KEYS[5] group_running (see includes/groups.lua)
-- ARGV[1] most          most groups listed
-- Returns an array: the number of groups in all, then name, waiting, running, state for each
local group_lines, groups_ready, groups_resting, groups_full = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local group_running = KEYS[5]
local most = tonumber(ARGV[1])
-- @include "groups"

local listed, seen, reply = 0, {}, {0}
local function add(group, state)
  if group == NO_GROUP or seen[group] then return end
  seen[group] = true
  reply[1] = reply[1] + 1
  if listed >= most then return end
  listed = listed + 1
  local low, high = line_range(group)
  reply[#reply + 1] = group
  reply[#reply + 1] = redis.call('ZLEXCOUNT', group_lines, low, high)
  reply[#reply + 1] = tonumber(redis.call('HGET', group_running, group)) or 0
  reply[#reply + 1] = state
end
for _, group in ipairs(redis.call('ZRANGE', groups_ready, 0, -1)) do add(group, 'ready') end
for _, group in ipairs(redis.call('ZRANGE', groups_resting, 0, -1)) do add(group, 'resting') end
for _, group in ipairs(redis.call('SMEMBERS', groups_full)) do add(group, 'full') end
local running = redis.call('HKEYS', group_running)
for _, group in ipairs(running) do add(group, 'idle') end
return reply
