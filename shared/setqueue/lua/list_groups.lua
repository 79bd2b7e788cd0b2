#!lua flags=no-writes
-- list_groups.lua: the groups with jobs waiting or in progress, in one snapshot, each with its
-- waiting and running counts and state (ready, resting: rate used up, full: concurrency reached,
-- idle: nothing waiting); the line of groups first (in turn order), then resting, full, running only.
-- KEYS[1] group_lines KEYS[2] groups_ready KEYS[3] groups_resting KEYS[4] groups_full KEYS[5] group_running
-- ARGV[1] most groups listed
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
