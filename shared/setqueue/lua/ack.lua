#!lua flags=allow-oom
-- ack.lua: move finished jobs in_progress -> done, if the caller still owns them.
-- A caller owns a job while owners names its token: from its claim until the job leaves
-- in_progress. That covers a lock that expired while nobody took the job over (the cleaner
-- clears owners when it requeues, a new claim overwrites it). A stale ack changes nothing.
-- Each claim's lock counts down by the jobs acked and is dropped when none is left. The job's
-- enqueue time, done time and attempt count go into finished, kept while done keeps the id.
--
-- KEYS[1] request      request record setqueue:{Q}:req:<request id>
-- KEYS[2] in_progress  KEYS[3] done
-- KEYS[4] done_log     (zset: id -> done time in ms; drives the retention of done)
-- KEYS[5] pending      KEYS[6] attempts   KEYS[7] payloads   KEYS[8] errors
-- KEYS[9] owners       (hash: id -> lease token of its current claim)
-- KEYS[10] finished    (hash: id -> "<enqueued ms>:<finished ms>:<attempts>" of ids in done or failed)
-- KEYS[11] options     (hash: id -> the job's own options, forgotten once it is done)
-- KEYS[FIRST_LOCK..]   lock key setqueue:{Q}:lock:<token> of each claim, in the order of the tokens
-- ARGV[1] record_ttl   request record TTL in ms
-- ARGV[2] keep         most ids kept in done (0 = no limit); the oldest are dropped beyond it
-- ARGV[CLAIMS..]       T, the number of claims; their T tokens; then id, claim number (1..T),
--                      enqueue time in ms (as the claim read it; "" if unknown) and attempt number
--                      of each lease (see includes/claims.lua)
-- Returns a string: now ms, a space, then "1" for each lease acked and "0" for each stale one
local request, in_progress, done, done_log, pending = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local attempts, payloads, errors, owners, finished = KEYS[6], KEYS[7], KEYS[8], KEYS[9], KEYS[10]
local options = KEYS[11]
local FIRST_LOCK = 12  -- KEYS[FIRST_LOCK..] lock key of each claim
local record_ttl, keep = ARGV[1], tonumber(ARGV[2])
local CLAIMS = 3  -- ARGV[CLAIMS..] the claims, then the leases: id, claim number, enqueue ms, attempt
-- @include "request_record"
-- @include "now_ms"
-- @include "claims"
-- @include "lock_countdown"
-- @include "finish"

local cached = recorded(request)
if cached then return cached end

local now = now_ms()
local locks, tokens, ids, claim_of, enqueued, attempt = read_claims(FIRST_LOCK, CLAIMS, 4)
local owner = redis.call('HMGET', owners, unpack(ids))

-- One command per key for the whole batch, not one per id (see claim.lua).
local flags, owned, scored, kept, seen, held_less = {}, {}, {}, {}, {}, {}
for j = 1, #ids do
  local id, c = ids[j], claim_of[j]
  -- The same lease twice in one call: the second one is stale (owners is cleared below).
  if not seen[id] and owner[j] == tokens[c] then
    seen[id] = true
    owned[#owned + 1] = id
    scored[#scored + 1] = now
    scored[#scored + 1] = id
    kept[#kept + 1] = id
    kept[#kept + 1] = finished_record(enqueued[j], now, attempt[j])
    held_less[c] = (held_less[c] or 0) + 1
    flags[j] = '1'
  else
    flags[j] = '0'
  end
end

local acked = #owned
if acked > 0 then
  redis.call('ZREM', in_progress, unpack(owned))
  redis.call('SADD', done, unpack(owned))
  redis.call('ZREM', pending, unpack(owned))
  redis.call('HDEL', attempts, unpack(owned))
  redis.call('HDEL', payloads, unpack(owned))
  redis.call('HDEL', errors, unpack(owned))
  redis.call('HDEL', owners, unpack(owned))
  redis.call('HDEL', options, unpack(owned))
  redis.call('ZADD', done_log, unpack(scored))
  redis.call('HSET', finished, unpack(kept))
  for c, n in pairs(held_less) do count_down(locks[c], n) end
end

if acked > 0 and keep > 0 then
  local excess = redis.call('ZCARD', done_log) - keep
  if excess > 0 then
    local oldest = redis.call('ZPOPMIN', done_log, excess)
    local dropped = {}
    for j = 1, #oldest, 2 do dropped[#dropped + 1] = oldest[j] end
    forget_done(done, finished, dropped)
  end
end

return record(request, now .. ' ' .. table.concat(flags), record_ttl)
