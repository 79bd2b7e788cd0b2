#!lua flags=allow-oom
-- drain.lua: move the releases acks recorded in released to the line (includes/released.lua), for
-- a reader about to show states (stats, inspect) when no claim or sweep has yet: up to DRAIN_MOST a
-- call, whoever comes next completing what the ack recorded. allow-oom: it moves jobs, adds none.
-- KEYS[1] released KEYS[2] waiting KEYS[3] deps KEYS[4] arrived KEYS[5] todos KEYS[6] seq
-- KEYS[7] pending KEYS[8] group_of KEYS[9] grouped KEYS[10] group_lines KEYS[11] groups_ready
-- KEYS[12] limits
-- ARGV[1] queue (its name, as links name it)
-- Returns how many jobs joined the line
local released, waiting, deps, arrived, todos, seq = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6]
local pending, group_of, grouped, group_lines, groups_ready = KEYS[7], KEYS[8], KEYS[9], KEYS[10], KEYS[11]
local limits = KEYS[12]
local queue = ARGV[1]
-- @include "now_ms"
-- @include "released"

if redis.call('EXISTS', released) == 0 then return 0 end
local W = {
  released = released, waiting = waiting, deps = deps, arrived = arrived, todos = todos, seq = seq, pending = pending,
  group_of = group_of,
}
local G = {limits = limits, grouped = grouped, lines = group_lines, group_of = group_of, ready = groups_ready}
return drain_released(W, G, queue, now_ms())
