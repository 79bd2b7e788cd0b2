#!lua flags=allow-oom
-- sweep.lua: the cleaner's step. Candidates come from ZSCAN in_progress, each with the claim
-- that owned it when the cleaner read owners. An id still in in_progress, still owned by that
-- claim, whose claim's lock is gone (its worker died or hung past the lease) goes back to todos,
-- or into failed once its attempts are used up. An id with a live lock is never touched; an id
-- whose owner changed meanwhile waits for the next sweep; an id another cleaner already moved is
-- no longer in in_progress: so concurrent sweeps are safe. Also drops ids from done that are
-- older than the age retention, and promotes scheduled jobs that are due (at most trim_limit) into
-- todos, waking idle workers for them, and drops results past their TTL. Each id it moves gets a
-- line in its history naming the worker that held it; dead-lettered ones are published as ended.
-- A job with a group goes back to its group's line and its group counts it down (includes/
-- groups.lua); groups' rate states that are past (a full bucket, the same as none) are dropped.
--
-- KEYS[1] request        request record setqueue:{Q}:req:<request id>
-- KEYS[2] todos   KEYS[3] in_progress   KEYS[4] failed
-- KEYS[5] pending   KEYS[6] attempts   KEYS[7] errors   KEYS[8] wake
-- KEYS[9] done    KEYS[10] done_log   KEYS[11] owners
-- KEYS[12] finished      (hash: id -> "<enqueued ms>:<finished ms>:<attempts>" of ids in done or failed)
-- KEYS[13] scheduled     (zset: id -> due time in ms)
-- KEYS[14] seq           (counter: the last place given in the line)
-- KEYS[15] priorities    (hash: id -> priority of a scheduled or failed job whose priority is not 0)
-- KEYS[16] options       (hash: id -> the job's own options: its max attempts, when it has them)
-- KEYS[17] swept         (string with a TTL of a day from the last sweep: its age is a day less its TTL)
-- KEYS[18] history       KEYS[19] results   KEYS[20] result_expiry   KEYS[21] cancelled   KEYS[22] progress
-- KEYS[23] flow   KEYS[24] grouped   KEYS[25] group_lines   KEYS[26] group_of   KEYS[27] groups_ready
-- KEYS[28] group_running   KEYS[29] groups_full   KEYS[30] group_buckets  (includes/groups.lua)
-- KEYS[FIRST_LOCK..]     lock key setqueue:{Q}:lock:<token> of each claim, in the order of the tokens
-- ARGV[1] record_ttl     request record TTL in ms
-- ARGV[2] max_attempts   (unless a job has its own)
-- ARGV[3] wake_cap       wake list cap
-- ARGV[4] max_age        done retention age in ms (0 = keep forever)
-- ARGV[5] trim_limit     most ids to drop from done, expired results to drop, and to promote from scheduled, in this call
-- ARGV[6] who            the sweeper (host:pid), for the history
-- ARGV[7] ended          the channel dead-lettered ids are published on ("failed\n<id>...")
-- ARGV[CLAIMS..]         T, the number of claims; their T tokens; then candidate id, claim number
--                        (1..T, or 0: no owner) of each candidate (see includes/claims.lua)
-- Returns a JSON string: [[requeued ids], [dead-lettered ids], number of ids dropped from done,
-- number of scheduled ids promoted]
local request, todos, in_progress, failed, pending = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local attempts, errors, wake, done, done_log, owners = KEYS[6], KEYS[7], KEYS[8], KEYS[9], KEYS[10], KEYS[11]
local finished, scheduled, seq, priorities = KEYS[12], KEYS[13], KEYS[14], KEYS[15]
local options, swept, history, results, result_expiry = KEYS[16], KEYS[17], KEYS[18], KEYS[19], KEYS[20]
local cancelled, progress = KEYS[21], KEYS[22]
local flow, grouped, group_lines, group_of, groups_ready = KEYS[23], KEYS[24], KEYS[25], KEYS[26], KEYS[27]
local group_running, groups_full, group_buckets = KEYS[28], KEYS[29], KEYS[30]
local FIRST_LOCK = 31  -- KEYS[FIRST_LOCK..] lock key of each claim
local record_ttl, max_attempts, wake_cap = ARGV[1], tonumber(ARGV[2]), ARGV[3]
local max_age, trim_limit, who, ended = tonumber(ARGV[4]), tonumber(ARGV[5]), ARGV[6], ARGV[7]
local CLAIMS = 8  -- ARGV[CLAIMS..] the claims, then the candidates: id, claim number
local SWEPT_TTL_MS = 86400000  -- the sweep stamp lasts a day: how long ago it was set is a day less its TTL
-- @include "request_record"
-- @include "now_ms"
-- @include "claims"
-- @include "wake"
-- @include "finish"
-- @include "promote"
-- @include "options"
-- @include "history"

local cached = recorded(request)
if cached then return cached end

local now = now_ms()
local G = {
  flow = flow, grouped = grouped, lines = group_lines, group_of = group_of,
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
        dead_letter(in_progress, failed, pending, attempts, errors, finished, priorities, id, reason, now)
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

local trimmed = 0
if max_age > 0 then
  local old = redis.call('ZRANGE', done_log, '-inf', now - max_age, 'BYSCORE', 'LIMIT', 0, trim_limit)
  if #old > 0 then
    forget_ended(done, cancelled, finished, results, result_expiry, history, progress, old)
    redis.call('ZREM', done_log, unpack(old))
  end
  trimmed = #old
end

local expired = redis.call('ZRANGE', result_expiry, '-inf', now, 'BYSCORE', 'LIMIT', 0, trim_limit)
if #expired > 0 then
  redis.call('HDEL', results, unpack(expired))
  redis.call('ZREM', result_expiry, unpack(expired))
end

local promoted = promote_due(G, scheduled, todos, pending, priorities, seq, now, trim_limit)
if promoted > 0 then wake_workers(wake, promoted, wake_cap) end

return record(request, cjson.encode({requeued, dead, trimmed, promoted}), record_ttl)
