#!lua flags=allow-oom
-- ack.lua: move finished jobs in_progress -> done if owners still names the caller's token (from
-- the claim until the job leaves in_progress, even past an expired lock nobody took over); a stale
-- ack changes nothing. Locks count down; finished keeps times and attempts, results what handlers
-- returned (result_ttl ms); acked ids go out on ended; a full group takes a turn again. Their
-- dependents waiting in this queue are told here and now (up to link_room of them; released, or
-- failed: a sole one recorded in released for the next claim), the others recorded in releasing for
-- the caller (includes/links.lua).
-- allow-oom: a finished job is never held up for lack of memory. An ack keeping results is first
-- sent without allow-oom (scripts.py ACK_KEEPING_RESULTS); refused, again with drop_results "1":
-- done, finished marked ":1", no result written, so result() says it is gone.
-- KEYS[1] request KEYS[2] in_progress KEYS[3] done KEYS[4] done_log KEYS[5] pending
-- KEYS[6] attempts KEYS[7] payloads KEYS[8] errors KEYS[9] owners KEYS[10] finished KEYS[11] options
-- KEYS[12] results KEYS[13] result_expiry KEYS[14] cancelled KEYS[15] history KEYS[16] progress
-- KEYS[17] wake KEYS[18] limits KEYS[19] group_of KEYS[20] group_running KEYS[21] groups_full
-- KEYS[22] groups_ready KEYS[23] enqueued KEYS[24] linked KEYS[25] releasing KEYS[26] release_outcomes
-- KEYS[27] dependents KEYS[28] dep_lines KEYS[29] arrived KEYS[30] arrived_count KEYS[31] deps
-- KEYS[32] waiting KEYS[33] todos KEYS[34] seq KEYS[35] scheduled KEYS[36] priorities KEYS[37] failed
-- KEYS[38] grouped KEYS[39] group_lines KEYS[40] groups_resting KEYS[41] forgetting KEYS[42] released
-- KEYS[FIRST_LOCK..] each claim's lock, in token order
-- ARGV[1] record_ttl ms  ARGV[2] most (ids in done and cancelled; 0 = no limit)
-- ARGV[3] result_ttl ms (0: not kept)  ARGV[4] ended channel ("done\n<id>...")  ARGV[5] wake_cap
-- ARGV[6] drop_results ("1": write no result)  ARGV[7] queue (this queue's name, as links name it)
-- ARGV[8] link_room (the most dependents told here)
-- ARGV[CLAIMS..] the claims (includes/claims.lua), then per lease: id, claim number, enqueue ms
-- ("" unknown), attempt, result ("" none), keep payload ("1": it stays with the job in done)
-- Returns a string: now ms, a space, "1" per lease acked, "0" per stale one, then the dependents
-- released and failed here, space-separated; then, a line each, the ids whose dependents are still
-- to be told (releasing, includes/links.lua): acked ones, and dependents failed here in turn; an
-- acked one whose dependents were all read here is followed by those of other queues, each after a
-- NUL (tell_here)
local request, in_progress, done, done_log, pending = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local attempts, payloads, errors, owners, finished = KEYS[6], KEYS[7], KEYS[8], KEYS[9], KEYS[10]
local options, results, result_expiry = KEYS[11], KEYS[12], KEYS[13]
local cancelled, history, progress, wake = KEYS[14], KEYS[15], KEYS[16], KEYS[17]
local limits, group_of, group_running, groups_full, groups_ready = KEYS[18], KEYS[19], KEYS[20], KEYS[21], KEYS[22]
local enqueued, linked, releasing, release_outcomes = KEYS[23], KEYS[24], KEYS[25], KEYS[26]
local dependents, dep_lines, arrived, arrived_count, deps = KEYS[27], KEYS[28], KEYS[29], KEYS[30], KEYS[31]
local waiting, todos, seq, scheduled, priorities, failed = KEYS[32], KEYS[33], KEYS[34], KEYS[35], KEYS[36], KEYS[37]
local grouped, group_lines, groups_resting, forgetting, released = KEYS[38], KEYS[39], KEYS[40], KEYS[41], KEYS[42]
local FIRST_LOCK = 43  -- KEYS[FIRST_LOCK..] lock key of each claim
local record_ttl, most, result_ttl, ended = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3]), ARGV[4]
local wake_cap, drop_results, queue, link_room = ARGV[5], ARGV[6], ARGV[7], tonumber(ARGV[8])
local CLAIMS = 9  -- ARGV[CLAIMS..] the claims, then per lease: id, claim, enqueue ms, attempt, result, keep
-- @include "request_record"
-- @include "now_ms"
-- @include "claims"
-- @include "lock_countdown"
-- @include "finish"
-- @include "groups"
-- @include "wake"
-- @include "links"

local cached = recorded(request)
if cached then return cached end
local L = {linked = linked, releasing = releasing, release_outcomes = release_outcomes, dependents = dependents,
  dep_lines = dep_lines, arrived = arrived, arrived_count = arrived_count, deps = deps, forgetting = forgetting}

local now = now_ms()
-- Printed once, not per job: every job of the call ends at this time (and its result expires together).
local now_text = string.format('%d', now)
local expires_text = string.format('%d', now + result_ttl)
local locks, tokens, ids, claim_of, joined, attempt, result, keep_payload = read_claims(FIRST_LOCK, CLAIMS, 6)
local owner = redis.call('HMGET', owners, unpack(ids))
-- The first enqueue time of a job that joined the line later (scheduled, retried after a backoff).
local first = {}
if redis.call('EXISTS', enqueued) == 1 then first = redis.call('HMGET', enqueued, unpack(ids)) end

-- One command per key for the batch (see claim.lua).
local flags, owned, scored, kept, seen, held_less = {}, {}, {}, {}, {}, {}
local returned, expiring, unkept = {}, {}, {}
local acked, kept_results, dropped_payloads = 0, 0, 0  -- counts, not #t: Lua's # searches the table each time
for j = 1, #ids do
  local id, c = ids[j], claim_of[j]
  -- The same lease twice in one call: the second is stale.
  if not seen[id] and owner[j] == tokens[c] then
    seen[id] = true
    acked = acked + 1
    owned[acked] = id
    scored[2 * acked - 1], scored[2 * acked] = now_text, id
    local with_result = result_ttl > 0 and result[j] ~= ''
    if with_result and drop_results ~= '1' then
      kept_results = kept_results + 1
      returned[2 * kept_results - 1], returned[2 * kept_results] = id, result[j]
      expiring[2 * kept_results - 1], expiring[2 * kept_results] = expires_text, id
    end
    if keep_payload[j] ~= '1' then
      dropped_payloads = dropped_payloads + 1
      unkept[dropped_payloads] = id
    end
    kept[2 * acked - 1] = id
    kept[2 * acked] = finished_record(first[j] or joined[j], now_text, attempt[j], with_result)
    held_less[c] = (held_less[c] or 0) + 1
    flags[j] = '1'
  else
    flags[j] = '0'
  end
end

if acked > 0 then
  redis.call('ZREM', in_progress, unpack(owned))
  local G = {limits = limits, group_of = group_of, running = group_running, full = groups_full, ready = groups_ready}
  local freed = left_progress(G, owned, true)
  if freed > 0 then wake_workers(wake, freed, wake_cap) end
  redis.call('SADD', done, unpack(owned))
  redis.call('ZREM', pending, unpack(owned))
  redis.call('HDEL', attempts, unpack(owned))
  -- What only some jobs have, dropped only where the queue has any (no arguments for an absent key).
  if #unkept > 0 and redis.call('EXISTS', payloads) == 1 then redis.call('HDEL', payloads, unpack(unkept)) end
  if redis.call('EXISTS', errors) == 1 then redis.call('HDEL', errors, unpack(owned)) end
  redis.call('HDEL', owners, unpack(owned))
  if redis.call('EXISTS', options) == 1 then redis.call('HDEL', options, unpack(owned)) end
  if #first > 0 then redis.call('HDEL', enqueued, unpack(owned)) end
  redis.call('ZADD', done_log, unpack(scored))
  redis.call('HSET', finished, unpack(kept))
  if #returned > 0 then
    redis.call('HSET', results, unpack(returned))
    redis.call('ZADD', result_expiry, unpack(expiring))
  end
  for c, n in pairs(held_less) do count_down(locks[c], n) end
  redis.call('PUBLISH', ended, 'done\n' .. table.concat(owned, '\n'))
end
-- Dependents, only where some job has any (one EXISTS a call otherwise).
local told, released_here, failed_here = {}, 0, 0
if acked > 0 and redis.call('EXISTS', linked) == 1 then
  local W = {
    linked = linked, releasing = releasing, release_outcomes = release_outcomes, dependents = dependents,
    arrived = arrived, arrived_count = arrived_count, waiting = waiting, deps = deps, todos = todos, seq = seq,
    pending = pending, enqueued = enqueued, scheduled = scheduled, priorities = priorities, wake = wake,
    failed = failed, errors = errors, finished = finished, history = history, grouped = grouped,
    group_of = group_of, released = released,
  }
  local G = {
    limits = limits, grouped = grouped, lines = group_lines, group_of = group_of, ready = groups_ready,
    resting = groups_resting, full = groups_full,
  }
  local T = {wake_cap = wake_cap, ended = ended, failed_ids = {}, releases = {}, woken = 0}
  told = tell_here(W, G, T, owned, queue, link_room, now)
  publish_failed(W, T)
  for j = 1, #T.releases do told[#told + 1] = T.releases[j] end
  released_here, failed_here = T.woken, #T.failed_ids
end

if acked > 0 and most > 0 then
  local excess = redis.call('ZCARD', done_log) - most
  if excess > 0 then
    local oldest = redis.call('ZPOPMIN', done_log, excess)
    local dropped = {}
    for j = 1, #oldest, 2 do dropped[#dropped + 1] = oldest[j] end
    forget_ended(done, cancelled, finished, results, result_expiry, history, progress, payloads, dropped)
    forget_links(L, dropped, now)
  end
end

local reply = now .. ' ' .. table.concat(flags, '') .. ' ' .. released_here .. ' ' .. failed_here
if #told > 0 then reply = reply .. '\n' .. table.concat(told, '\n') end
return record(request, reply, record_ttl)
