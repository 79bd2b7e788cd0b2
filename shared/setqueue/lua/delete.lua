#!lua flags=allow-oom
-- delete.lua: remove one job and its bookkeeping, whatever its state; its claim's lock counts one
-- less (a worker running it finds its lease stale); a grouped job leaves its line or counts down.
-- KEYS[1] request KEYS[2] todos KEYS[3] in_progress KEYS[4] done KEYS[5] failed KEYS[6] pending
-- KEYS[7] attempts KEYS[8] payloads KEYS[9] errors KEYS[10] done_log
-- KEYS[11] lock (of the claim that owned the id as the caller read owners; any lock key if none)
-- KEYS[12] owners KEYS[13] finished KEYS[14] scheduled KEYS[15] priorities KEYS[16] options
-- KEYS[17] cancelled KEYS[18] results KEYS[19] result_expiry KEYS[20] history KEYS[21] progress
-- KEYS[22] limits KEYS[23] grouped KEYS[24] group_lines KEYS[25] group_of KEYS[26] groups_ready
-- KEYS[27] groups_resting KEYS[28] groups_full KEYS[29] group_running KEYS[30] wake KEYS[31] enqueued
-- KEYS[32] waiting KEYS[33] registering KEYS[34] linked KEYS[35] releasing KEYS[36] release_outcomes
-- KEYS[37] dependents KEYS[38] dep_lines KEYS[39] arrived KEYS[40] arrived_count KEYS[41] deps
-- KEYS[42] forgetting
-- ARGV[1] record_ttl ms  ARGV[2] id  ARGV[3] token of that claim ("" if none)  ARGV[4] wake_cap
-- Returns a JSON string: [the state the id was in: "todos", "in_progress", "done", "failed",
-- "scheduled", "cancelled", "waiting", or false, then whether its dependents are to be told that
-- it was deleted (releasing, includes/links.lua)]
local request, todos, in_progress, done, failed, pending = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6]
local attempts, payloads, errors, done_log, lock, owners = KEYS[7], KEYS[8], KEYS[9], KEYS[10], KEYS[11], KEYS[12]
local finished, scheduled, priorities, options = KEYS[13], KEYS[14], KEYS[15], KEYS[16]
local cancelled, results, result_expiry, history, progress = KEYS[17], KEYS[18], KEYS[19], KEYS[20], KEYS[21]
local limits, grouped, group_lines, group_of, groups_ready = KEYS[22], KEYS[23], KEYS[24], KEYS[25], KEYS[26]
local groups_resting, groups_full, group_running, wake = KEYS[27], KEYS[28], KEYS[29], KEYS[30]
local enqueued, waiting, registering, linked, releasing = KEYS[31], KEYS[32], KEYS[33], KEYS[34], KEYS[35]
local release_outcomes, dependents, dep_lines, arrived, arrived_count = KEYS[36], KEYS[37], KEYS[38], KEYS[39], KEYS[40]
local deps, forgetting = KEYS[41], KEYS[42]
local record_ttl, id, token, wake_cap = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
-- @include "request_record"
-- @include "lock_countdown"
-- @include "groups"
-- @include "wake"
-- @include "now_ms"
-- @include "links"

local cached = recorded(request)
if cached then return cached end

-- One job less for the lock, if that claim still owns it.
if token ~= '' and redis.call('HGET', owners, id) == token then count_down(lock, 1) end

local G = {
  limits = limits, grouped = grouped, lines = group_lines, group_of = group_of, ready = groups_ready,
  resting = groups_resting, full = groups_full, running = group_running,
}
local state = false
if leave_line(G, todos, id) then state = 'todos' end
if redis.call('ZSCORE', in_progress, id) then
  state = 'in_progress'
  if left_progress(G, {id}, true) > 0 then wake_workers(wake, 1, wake_cap) end
  redis.call('ZREM', in_progress, id)
end
if redis.call('SREM', done, id) == 1 then state = 'done' end
if redis.call('SREM', failed, id) == 1 then state = 'failed' end
if redis.call('ZREM', scheduled, id) == 1 then state = 'scheduled' end
if redis.call('SREM', cancelled, id) == 1 then state = 'cancelled' end
if redis.call('ZREM', waiting, id) == 1 then state = 'waiting' end
redis.call('ZREM', registering, id)
redis.call('HDEL', priorities, id)
redis.call('ZREM', pending, id)
redis.call('HDEL', enqueued, id)
redis.call('HDEL', attempts, id)
redis.call('HDEL', payloads, id)
redis.call('HDEL', errors, id)
redis.call('ZREM', done_log, id)
redis.call('HDEL', owners, id)
redis.call('HDEL', finished, id)
redis.call('HDEL', options, id)
redis.call('HDEL', results, id)
redis.call('ZREM', result_expiry, id)
redis.call('HDEL', history, id)
redis.call('HDEL', progress, id)
redis.call('HDEL', group_of, id)
local told = {}
if state then
  local L = {linked = linked, releasing = releasing, release_outcomes = release_outcomes, dependents = dependents,
    dep_lines = dep_lines, arrived = arrived, arrived_count = arrived_count, deps = deps, forgetting = forgetting}
  -- Its dependents are told it was deleted (an ended job's were told already: its releasing entry
  -- is gone, so they are not told again).
  if state ~= 'done' and state ~= 'failed' and state ~= 'cancelled' then
    told = mark_ended(L, {id}, 'deleted', now_ms())
  end
  forget_links(L, {id}, now_ms())
end

return record(request, cjson.encode({state, #told > 0}), record_ttl)
