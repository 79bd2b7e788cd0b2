#!lua flags=allow-oom
-- sweep.lua: the cleaner's step. Each candidate (from ZSCAN in_progress, with its owner as read)
-- still in in_progress, still owned so, whose lock is gone goes back to the line, or to failed once
-- out of attempts. A live lock is never touched, a changed owner waits, a moved id is gone from
-- in_progress: concurrent sweeps are safe. Also, up to trim_limit each: drops done ids past max_age
-- (with their payloads) and expired results, promotes due scheduled jobs. Moves get history lines;
-- dead letters go out on ended; past group rate states (a full bucket) are dropped. Releases acks
-- recorded join the line (includes/released.lua), in case no claim came since.
-- KEYS[1] request KEYS[2] todos KEYS[3] in_progress KEYS[4] failed KEYS[5] pending KEYS[6] attempts
-- KEYS[7] errors KEYS[8] wake KEYS[9] done KEYS[10] done_log KEYS[11] owners KEYS[12] finished
-- KEYS[13] scheduled KEYS[14] seq KEYS[15] priorities KEYS[16] options KEYS[17] swept
-- KEYS[18] history KEYS[19] results KEYS[20] result_expiry KEYS[21] cancelled KEYS[22] progress
-- KEYS[23] limits KEYS[24] grouped KEYS[25] group_lines KEYS[26] group_of KEYS[27] groups_ready
-- KEYS[28] group_running KEYS[29] groups_full KEYS[30] group_buckets KEYS[31] enqueued KEYS[32] payloads
-- KEYS[33] linked KEYS[34] releasing KEYS[35] release_outcomes KEYS[36] dependents KEYS[37] dep_lines
-- KEYS[38] arrived KEYS[39] arrived_count KEYS[40] deps KEYS[41] forgetting KEYS[42] released KEYS[43] waiting
-- KEYS[FIRST_LOCK..] each claim's lock, in token order
-- ARGV[1] record_ttl ms  ARGV[2] max_attempts (unless a job has its own)  ARGV[3] wake_cap
-- ARGV[4] max_age of done, ms (0 = forever)  ARGV[5] trim_limit  ARGV[6] who (host:pid, for history)
-- ARGV[7] ended channel ("failed\n<id>...")  ARGV[8] queue (its name, as links name it)
-- ARGV[CLAIMS..] the claims (includes/claims.lua), then per candidate: id, claim number (0: no owner)
-- Returns a JSON string: [[requeued ids], [dead-lettered ids], ids dropped from done, ids promoted,
-- [dead-lettered ids whose dependents are to be told (releasing, includes/links.lua)]]
local request, todos, in_progress, failed, pending = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local attempts, errors, wake, done, done_log, owners = KEYS[6], KEYS[7], KEYS[8], KEYS[9], KEYS[10], KEYS[11]
local finished, scheduled, seq, priorities = KEYS[12], KEYS[13], KEYS[14], KEYS[15]
local options, swept, history, results, result_expiry = KEYS[16], KEYS[17], KEYS[18], KEYS[19], KEYS[20]
local cancelled, progress = KEYS[21], KEYS[22]
local limits, grouped, group_lines, group_of, groups_ready = KEYS[23], KEYS[24], KEYS[25], KEYS[26], KEYS[27]
local group_running, groups_full, group_buckets, enqueued = KEYS[28], KEYS[29], KEYS[30], KEYS[31]
local payloads, linked, releasing, release_outcomes = KEYS[32], KEYS[33], KEYS[34], KEYS[35]
local dependents, dep_lines, arrived, arrived_count, deps = KEYS[36], KEYS[37], KEYS[38], KEYS[39], KEYS[40]
local forgetting, released, waiting = KEYS[41], KEYS[42], KEYS[43]
local FIRST_LOCK = 44  -- KEYS[FIRST_LOCK..] lock key of each claim
local record_ttl, max_attempts, wake_cap = ARGV[1], tonumber(ARGV[2]), ARGV[3]
local max_age, trim_limit, who, ended, queue = tonumber(ARGV[4]), tonumber(ARGV[5]), ARGV[6], ARGV[7], ARGV[8]
local CLAIMS = 9  -- ARGV[CLAIMS..] the claims, then the candidates: id, claim number
local SWEPT_TTL_MS = 86400000  -- a day: the stamp's age is a day less its TTL
-- @include "request_record"
-- @include "now_ms"
-- @include "claims"
-- @include "wake"
-- @include "finish"
-- @include "promote"
-- @include "options"
-- @include "history"
-- @include "links"
-- @include "released"

local cached = recorded(request)
if cached then return cached end

local now = now_ms()
local G = {
  limits = limits, grouped = grouped, lines = group_lines, group_of = group_of,
  ready = groups_ready, running = group_running, full = groups_full,
}
redis.call('SET', swept, now, 'PX', SWEPT_TTL_MS)
local locks, tokens, ids, claim_of = read_claims(FIRST_LOCK, CLAIMS, 2)

local requeued, dead, lock_gone, left = {}, {}, {}, {}
for j = 1, #ids do
  local id, c = ids[j], claim_of[j]
  local owner = redis.call('HGET', owners, id)
  local expected = false
  if c > 0 then expected = tokens[c] end
  local rank = redis.call('ZSCORE', in_progress, id)
  if rank and owner == expected then
    if c > 0 and lock_gone[c] == nil then lock_gone[c] = redis.call('EXISTS', locks[c]) == 0 end
    if c == 0 or lock_gone[c] then
      redis.call('HDEL', owners, id)
      left[#left + 1] = id
      local tries = tonumber(redis.call('HGET', attempts, id)) or 0
      local most = attempts_allowed(options, id, max_attempts)
      local held_by = '?'
      if c > 0 then held_by = holder(tokens[c]) end
      if tries >= most then
        local reason = 'lease expired on attempt ' .. tries .. ' of ' .. most
        dead_letter(in_progress, failed, pending, enqueued, attempts, errors, finished, priorities, id, reason, now)
        remember(history, id, now, 'lease lost', held_by, 'swept by ' .. who .. '; dead-lettered: ' .. reason)
        dead[#dead + 1] = id
      else
        remember(history, id, now, 'lease lost', held_by, 'swept by ' .. who .. '; back in line')
        redis.call('ZREM', in_progress, id)
        line_up(G, todos, {id}, {tonumber(rank)})
        requeued[#requeued + 1] = id
      end
    end
  end
end

local freed = left_progress(G, left, false)
if #requeued + freed > 0 then wake_workers(wake, math.max(1, freed), wake_cap) end
redis.call('ZREMRANGEBYSCORE', group_buckets, '-inf', now)
if #dead > 0 then redis.call('PUBLISH', ended, 'failed\n' .. table.concat(dead, '\n')) end
local L = {linked = linked, releasing = releasing, release_outcomes = release_outcomes, dependents = dependents,
  dep_lines = dep_lines, arrived = arrived, arrived_count = arrived_count, deps = deps, forgetting = forgetting}
local told = mark_ended(L, dead, 'failed', now)

local trimmed = 0
if max_age > 0 then
  local old = redis.call('ZRANGE', done_log, '-inf', now - max_age, 'BYSCORE', 'LIMIT', 0, trim_limit)
  if #old > 0 then
    forget_ended(done, cancelled, finished, results, result_expiry, history, progress, payloads, old)
    forget_links(L, old, now)
    redis.call('ZREM', done_log, unpack(old))
  end
  trimmed = #old
end

local expired = redis.call('ZRANGE', result_expiry, '-inf', now, 'BYSCORE', 'LIMIT', 0, trim_limit)
if #expired > 0 then
  redis.call('HDEL', results, unpack(expired))
  redis.call('ZREM', result_expiry, unpack(expired))
end

local W = {
  released = released, waiting = waiting, deps = deps, arrived = arrived, todos = todos, seq = seq, pending = pending,
  group_of = group_of,
}
local drained = drain_released(W, G, queue, now)
local promoted = promote_due(G, scheduled, todos, pending, priorities, seq, now, trim_limit)
if promoted + drained > 0 then wake_workers(wake, promoted + drained, wake_cap) end

return record(request, cjson.encode({requeued, dead, trimmed, promoted, told}), record_ttl)
