#!lua flags=allow-oom
-- cancel.lua: a waiting or running job goes to cancelled (an ended one is left alone). A running
-- one loses its owner and a lock count (its later ack, fail or renew is stale), and its id goes out
-- on cancel_channel for its worker to stop it. finished and done_log take it (done's retention);
-- payload, error and own options go. A history line names who cancelled and the holder; ended is told.
-- KEYS[1] request KEYS[2] todos KEYS[3] in_progress KEYS[4] done KEYS[5] failed KEYS[6] scheduled
-- KEYS[7] cancelled KEYS[8] pending KEYS[9] attempts KEYS[10] owners KEYS[11] finished
-- KEYS[12] priorities KEYS[13] done_log KEYS[14] history
-- KEYS[15] lock (of the claim that owned the id as the caller read owners; any lock key if none)
-- KEYS[16] payloads KEYS[17] errors KEYS[18] options KEYS[19] limits KEYS[20] grouped
-- KEYS[21] group_lines KEYS[22] group_of KEYS[23] groups_ready KEYS[24] groups_resting
-- KEYS[25] groups_full KEYS[26] group_running KEYS[27] wake KEYS[28] enqueued KEYS[29] waiting
-- KEYS[30] registering KEYS[31] linked KEYS[32] releasing KEYS[33] release_outcomes KEYS[34] dependents
-- ARGV[1] record_ttl ms  ARGV[2] id  ARGV[3] token of that claim ("" if none)  ARGV[4] who (host:pid)
-- ARGV[5] ended channel ("cancelled\n<id>")  ARGV[6] cancel_channel  ARGV[7] wake_cap
-- Returns a JSON string: [the state the id was in: "todos", "scheduled", "in_progress", "waiting"
-- (cancelled now), "done", "failed", "cancelled" (unchanged), or false: unknown, then whether its
-- dependents are to be told (releasing, includes/links.lua)]
local request, todos, in_progress, done, failed, scheduled = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6]
local cancelled, pending, attempts, owners, finished = KEYS[7], KEYS[8], KEYS[9], KEYS[10], KEYS[11]
local priorities, done_log, history, lock = KEYS[12], KEYS[13], KEYS[14], KEYS[15]
local payloads, errors, options = KEYS[16], KEYS[17], KEYS[18]
local limits, grouped, group_lines, group_of, groups_ready = KEYS[19], KEYS[20], KEYS[21], KEYS[22], KEYS[23]
local groups_resting, groups_full, group_running, wake = KEYS[24], KEYS[25], KEYS[26], KEYS[27]
local enqueued, waiting, registering, linked, releasing = KEYS[28], KEYS[29], KEYS[30], KEYS[31], KEYS[32]
local release_outcomes, dependents = KEYS[33], KEYS[34]
local record_ttl, id, token, who, ended, cancel_channel = ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5], ARGV[6]
local wake_cap = ARGV[7]
-- @include "request_record"
-- @include "now_ms"
-- @include "lock_countdown"
-- @include "finish"
-- @include "history"
-- @include "groups"
-- @include "wake"
-- @include "links"

local cached = recorded(request)
if cached then return cached end

local G = {
  limits = limits, grouped = grouped, lines = group_lines, group_of = group_of, ready = groups_ready,
  resting = groups_resting, full = groups_full, running = group_running,
}
local state = false
if redis.call('SISMEMBER', cancelled, id) == 1 then state = 'cancelled'
elseif redis.call('SISMEMBER', done, id) == 1 then state = 'done'
elseif redis.call('SISMEMBER', failed, id) == 1 then state = 'failed'
elseif leave_line(G, todos, id) then state = 'todos'
elseif redis.call('ZREM', scheduled, id) == 1 then state = 'scheduled'
elseif redis.call('ZSCORE', in_progress, id) then state = 'in_progress'
elseif redis.call('ZREM', waiting, id) == 1 then
  state = 'waiting'
  redis.call('ZREM', registering, id)
end

local told = {}
if state == 'todos' or state == 'scheduled' or state == 'in_progress' or state == 'waiting' then
  local now = now_ms()
  local held_by = ''
  if state == 'in_progress' then
    local owner = redis.call('HGET', owners, id)
    if owner and owner == token then count_down(lock, 1) end
    if owner then held_by = '; held by ' .. holder(owner) end
    redis.call('ZREM', in_progress, id)
    redis.call('HDEL', owners, id)
    redis.call('PUBLISH', cancel_channel, id)
    if left_progress(G, {id}, true) > 0 then wake_workers(wake, 1, wake_cap) end
  end
  redis.call('HDEL', group_of, id)
  local first = redis.call('HGET', enqueued, id) or redis.call('ZSCORE', pending, id)
  local tries = redis.call('HGET', attempts, id)
  redis.call('ZREM', pending, id)
  redis.call('HDEL', enqueued, id)
  redis.call('HDEL', attempts, id)
  redis.call('HDEL', priorities, id)
  redis.call('HDEL', payloads, id)
  redis.call('HDEL', errors, id)
  redis.call('HDEL', options, id)
  redis.call('SADD', cancelled, id)
  redis.call('ZADD', done_log, now, id)
  redis.call('HSET', finished, id, finished_record(first, now, tries, false))
  remember(history, id, now, 'cancelled', who, 'in ' .. state .. held_by)
  redis.call('PUBLISH', ended, 'cancelled\n' .. id)
  local L = {linked = linked, releasing = releasing, release_outcomes = release_outcomes, dependents = dependents}
  told = mark_ended(L, {id}, 'cancelled', now)
end

return record(request, cjson.encode({state, #told > 0}), record_ttl)
