-- ack.lua: move finished jobs in_progress -> done, if the caller still owns them.
-- A caller owns a job while owners names its token: from its claim until the job leaves
-- in_progress. That covers a lock that expired while nobody took the job over (the cleaner
-- clears owners when it requeues, a new claim overwrites it). A stale ack changes nothing.
-- Each claim's lock counts down by the jobs acked and is dropped when none is left.
--
-- KEYS[1] request record  setqueue:{Q}:req:<request id>
-- KEYS[2] in_progress   KEYS[3] done
-- KEYS[4] done_log    (zset: id -> done time in ms; drives the retention of done)
-- KEYS[5] pending     KEYS[6] attempts   KEYS[7] payloads   KEYS[8] errors
-- KEYS[9] owners      (hash: id -> lease token of its current claim)
-- KEYS[10..T+9] lock key setqueue:{Q}:lock:<token> of each claim, in the order of the tokens
-- ARGV[1] request record TTL in ms
-- ARGV[2] most ids kept in done (0 = no limit); the oldest are dropped beyond it
-- ARGV[3] T, the number of claims;  ARGV[4..T+3] their tokens
-- ARGV[T+4..] id, claim number (1..T) of each lease
-- Returns a string: now ms, a space, then "1" for each lease acked and "0" for each stale one
local record = redis.call('GET', KEYS[1])
if record then return record end

local t = redis.call('TIME')
local now = t[1] * 1000 + math.floor(t[2] / 1000)

local claims = tonumber(ARGV[3])
local ids, claim_of = {}, {}
for i = claims + 4, #ARGV, 2 do
  ids[#ids + 1] = ARGV[i]
  claim_of[#claim_of + 1] = tonumber(ARGV[i + 1])
end
local owner = redis.call('HMGET', KEYS[9], unpack(ids))

-- One command per key for the whole batch, not one per id (see claim.lua).
local flags, owned, scored, seen, held_less = {}, {}, {}, {}, {}
for j = 1, #ids do
  local id, c = ids[j], claim_of[j]
  -- The same lease twice in one call: the second one is stale (owners is cleared below).
  if not seen[id] and owner[j] == ARGV[c + 3] then
    seen[id] = true
    owned[#owned + 1] = id
    scored[#scored + 1] = now
    scored[#scored + 1] = id
    held_less[c] = (held_less[c] or 0) + 1
    flags[j] = '1'
  else
    flags[j] = '0'
  end
end

local acked = #owned
if acked > 0 then
  redis.call('SREM', KEYS[2], unpack(owned))
  redis.call('SADD', KEYS[3], unpack(owned))
  redis.call('ZREM', KEYS[5], unpack(owned))
  redis.call('HDEL', KEYS[6], unpack(owned))
  redis.call('HDEL', KEYS[7], unpack(owned))
  redis.call('HDEL', KEYS[8], unpack(owned))
  redis.call('HDEL', KEYS[9], unpack(owned))
  redis.call('ZADD', KEYS[4], unpack(scored))
  for c, n in pairs(held_less) do
    local lock = KEYS[c + 9]
    -- An expired lock stays gone: DECRBY would re-create it without a TTL.
    if redis.call('EXISTS', lock) == 1 and redis.call('DECRBY', lock, n) <= 0 then redis.call('DEL', lock) end
  end
end

local keep = tonumber(ARGV[2])
if acked > 0 and keep > 0 then
  local excess = redis.call('ZCARD', KEYS[4]) - keep
  if excess > 0 then
    local oldest = redis.call('ZPOPMIN', KEYS[4], excess)
    local dropped = {}
    for j = 1, #oldest, 2 do dropped[#dropped + 1] = oldest[j] end
    for s = 1, #dropped, 1000 do  -- unpack() has a limit: a lowered retention may drop many
      redis.call('SREM', KEYS[3], unpack(dropped, s, math.min(s + 999, #dropped)))
    end
  end
end

record = now .. ' ' .. table.concat(flags)
redis.call('SET', KEYS[1], record, 'PX', ARGV[1])
return record
