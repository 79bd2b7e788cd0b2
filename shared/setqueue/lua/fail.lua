#!lua flags=allow-oom
-- fail.lua: end attempts the caller owns (as in ack.lua; else nothing changes). "retry": while
-- attempts remain, to the back of its priority's line or, with a delay, scheduled; else failed.
-- "dead": failed at once. "release": back in its old place, no attempt used. Each outcome is a
-- history line naming the worker; dead-lettered ids go out on ended; grouped jobs rejoin their line.
-- KEYS[1] request KEYS[2] todos KEYS[3] in_progress KEYS[4] failed KEYS[5] pending KEYS[6] attempts
-- KEYS[7] errors KEYS[8] wake KEYS[9] owners KEYS[10] finished KEYS[11] scheduled KEYS[12] seq
-- KEYS[13] priorities KEYS[14] options KEYS[15] history KEYS[16] limits KEYS[17] grouped
-- KEYS[18] group_lines KEYS[19] group_of KEYS[20] groups_ready KEYS[21] group_running
-- KEYS[22] groups_full KEYS[23] enqueued KEYS[24] linked KEYS[25] releasing KEYS[26] release_outcomes
-- KEYS[27] dependents KEYS[FIRST_LOCK..] each claim's lock, in token order
-- ARGV[1] record_ttl ms  ARGV[2] max_attempts (unless the job has its own)  ARGV[3] wake_cap
-- ARGV[4] ended channel ("failed\n<id>...")
-- ARGV[CLAIMS..] the claims (includes/claims.lua), then per lease: id, claim number, mode
-- ("retry", "dead", "release"), reason, retry delay ms (0: none)
-- Returns a string: each lease's outcome, space-separated: retried, dead, released or stale; then,
-- a line each, the dead-lettered ids whose dependents are to be told (releasing, includes/links.lua)
local request, todos, in_progress, failed, pending = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local attempts, errors, wake, owners, finished, scheduled = KEYS[6], KEYS[7], KEYS[8], KEYS[9], KEYS[10], KEYS[11]
local seq, priorities, options, history = KEYS[12], KEYS[13], KEYS[14], KEYS[15]
local limits, grouped, group_lines, group_of, groups_ready = KEYS[16], KEYS[17], KEYS[18], KEYS[19], KEYS[20]
local group_running, groups_full, enqueued = KEYS[21], KEYS[22], KEYS[23]
local linked, releasing, release_outcomes, dependents = KEYS[24], KEYS[25], KEYS[26], KEYS[27]
local FIRST_LOCK = 28  -- KEYS[FIRST_LOCK..] lock key of each claim
local record_ttl, max_attempts, wake_cap, ended = ARGV[1], tonumber(ARGV[2]), ARGV[3], ARGV[4]
local CLAIMS = 5  -- ARGV[CLAIMS..] the claims, then the leases: id, claim number, mode, reason, delay ms
-- @include "request_record"
-- @include "now_ms"
-- @include "finish"
-- @include "claims"
-- @include "lock_countdown"
-- @include "wake"
-- @include "options"
-- @include "history"
-- @include "groups"
-- @include "links"

local cached = recorded(request)
if cached then return cached end

local locks, tokens, ids, claim_of, modes, reasons, delays = read_claims(FIRST_LOCK, CLAIMS, 5)
local now = now_ms()
local G = {
  limits = limits, grouped = grouped, lines = group_lines, group_of = group_of,
  ready = groups_ready, running = group_running, full = groups_full,
}
local outcomes, held_less, dead, left = {}, {}, {}, {}
local retried, delayed = 0, 0
for j = 1, #ids do
  local id, c, mode, reason, delay = ids[j], claim_of[j], modes[j], reasons[j], tonumber(delays[j])
  local rank = redis.call('ZSCORE', in_progress, id)
  if not rank or redis.call('HGET', owners, id) ~= tokens[c] then
    outcomes[#outcomes + 1] = 'stale'
  else
    rank = tonumber(rank)
    held_less[c] = (held_less[c] or 0) + 1
    left[#left + 1] = id
    redis.call('HDEL', owners, id)
    local who, said = holder(tokens[c]), string.match(reason, '^[^\n]*')
    local kind = 'failed'
    if string.sub(reason, 1, 7) == 'timeout' then kind = 'timed out' end
    if mode == 'release' then
      remember(history, id, now, 'handed back', who, said)
      redis.call('ZREM', in_progress, id)
      line_up(G, todos, {id}, {rank})
      redis.call('HINCRBY', attempts, id, -1)
      retried = retried + 1
      outcomes[#outcomes + 1] = 'released'
    elseif mode == 'retry' and (tonumber(redis.call('HGET', attempts, id)) or 0)
        < attempts_allowed(options, id, max_attempts) then
      redis.call('HSET', errors, id, reason)
      redis.call('ZREM', in_progress, id)
      local priority = priority_of(rank)
      remember(history, id, now, kind, who, said .. '; retried in ' .. (delay / 1000) .. 's')
      if delay > 0 then  -- scheduled, out of pending until due; enqueued keeps the first enqueue time
        local joined = redis.call('ZSCORE', pending, id)
        if joined then redis.call('HSETNX', enqueued, id, joined) end
        redis.call('ZREM', pending, id)
        redis.call('ZADD', scheduled, now + delay, id)
        if priority ~= 0 then redis.call('HSET', priorities, id, priority) end
        delayed = delayed + 1
      else  -- to the back of the line; pending keeps its enqueue time
        join_back(G, todos, seq, {id}, priority)
        retried = retried + 1
      end
      outcomes[#outcomes + 1] = 'retried'
    else
      dead_letter(in_progress, failed, pending, enqueued, attempts, errors, finished, priorities, id, reason, now)
      remember(history, id, now, kind, who, said .. '; dead-lettered')
      dead[#dead + 1] = id
      outcomes[#outcomes + 1] = 'dead'
    end
  end
end

for c, n in pairs(held_less) do count_down(locks[c], n) end
local freed = left_progress(G, left, false)
if freed > 0 then wake_workers(wake, freed, wake_cap) end

-- A retry wakes one idle worker: for a delayed one, its empty claim learns when the job is due.
if retried + delayed > 0 then wake_workers(wake, 1, wake_cap) end
if #dead > 0 then redis.call('PUBLISH', ended, 'failed\n' .. table.concat(dead, '\n')) end
local L = {linked = linked, releasing = releasing, release_outcomes = release_outcomes, dependents = dependents}
local told = mark_ended(L, dead, 'failed', now)

local reply = table.concat(outcomes, ' ')
if #told > 0 then reply = reply .. '\n' .. table.concat(told, '\n') end
return record(request, reply, record_ttl)
