#!lua flags=allow-oom
-- set_limits.lua: change limits (setqueue.limits) and wake idle workers so claims see it at
-- once. A change sends every group set aside (full, resting) back to the line of groups, to be
-- weighed against the new limits; removing the rate drops its state.
-- KEYS[1] limits KEYS[2] group_limits KEYS[3] groups_ready KEYS[4] groups_resting KEYS[5] groups_full
-- KEYS[6] wake
-- ARGV[1] wake_cap  ARGV[2] what ("pause", "resume", "rate", "group_concurrency", "group_rate" or
-- "group:<name>")  ARGV[3] value ("" removes it: "<count> <period ms> <burst>", a concurrency, or
-- "<concurrency>|<rate>")
-- Returns 1 if something changed, 0 if it was so already.
local limits, group_limits, groups_ready, groups_resting, groups_full, wake = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6]
local wake_cap, what, value = ARGV[1], ARGV[2], ARGV[3]
-- @include "wake"
-- @include "groups"

local changed = 0
if what == 'pause' then
  changed = redis.call('HSETNX', limits, 'paused', '1')
elseif what == 'resume' then
  changed = redis.call('HDEL', limits, 'paused')
else
  -- A group's own limits are in group_limits; the queue's, in limits.
  local group = string.match(what, '^group:(.+)$')
  if value == '' then
    if group then changed = redis.call('HDEL', group_limits, group) else changed = redis.call('HDEL', limits, what) end
    if what == 'rate' then redis.call('HDEL', limits, 'tat') end
  elseif group then
    if redis.call('HGET', group_limits, group) ~= value then
      redis.call('HSET', group_limits, group, value)
      changed = 1
    end
  elseif redis.call('HGET', limits, what) ~= value then
    redis.call('HSET', limits, what, value)
    changed = 1
  end
  if changed == 1 then
    -- In slices: unpack() has a limit.
    local G = {limits = limits, ready = groups_ready}
    local aside = redis.call('SMEMBERS', groups_full)
    for s = 1, #aside, 1000 do
      local slice = {unpack(aside, s, math.min(s + 999, #aside))}
      redis.call('SREM', groups_full, unpack(slice))
      take_turns(G, slice)
    end
    local resting = redis.call('ZRANGE', groups_resting, 0, -1)
    for s = 1, #resting, 1000 do
      local slice = {unpack(resting, s, math.min(s + 999, #resting))}
      redis.call('ZREM', groups_resting, unpack(slice))
      take_turns(G, slice)
    end
  end
end
if changed == 1 and what ~= 'pause' then wake_workers(wake, tonumber(wake_cap), wake_cap) end
return changed
