-- ack.lua: move finished jobs in_progress -> done, if the caller still owns them.
-- A caller owns a job while owners names its token: from its claim until the job leaves
-- in_progress. That covers a lock that expired while nobody took the job over (the cleaner
-- clears owners when it requeues, a new claim overwrites it). A stale ack changes nothing.
--
-- KEYS[1] request record  setqueue:{Q}:req:<request id>
-- KEYS[2] in_progress   KEYS[3] done
-- KEYS[4] done_log    (zset: id -> done time in ms; drives the retention of done)
-- KEYS[5] pending     KEYS[6] attempts   KEYS[7] payloads   KEYS[8] errors
-- KEYS[9] owners      (hash: id -> lease token of its current claim)
-- KEYS[10..] lock key of each lease, in the order of the pairs in ARGV[3..]
-- ARGV[1] request record TTL in ms
-- ARGV[2] most ids kept in done (0 = no limit); the oldest are dropped beyond it
-- ARGV[3..] id, token of each lease
-- Returns a JSON string: [now ms, [enqueue ms (or -1 if unknown) of each acked job, or -2 if stale]]
local cached = redis.call('GET', KEYS[1])
if cached then return cached end

local t = redis.call('TIME')
local now = t[1] * 1000 + math.floor(t[2] / 1000)

local results = {}
local owned_ids, slots, seen = {}, {}, {}
for i = 3, #ARGV, 2 do
  local id, token = ARGV[i], ARGV[i + 1]
  local lock = KEYS[10 + (i - 3) / 2]
  -- The same lease twice in one call: the second one is stale (owners is cleared further down).
  if not seen[id] and redis.call('HGET', KEYS[9], id) == token then
    seen[id] = true
    redis.call('SMOVE', KEYS[2], KEYS[3], id)
    redis.call('DEL', lock)
    owned_ids[#owned_ids + 1] = id
    results[#results + 1] = -1
    slots[#slots + 1] = #results
  else
    results[#results + 1] = -2
  end
end

-- The bookkeeping of every acked id in one command per key, not one per id.
local acked = #owned_ids
if acked > 0 then
  local enqueued = redis.call('ZMSCORE', KEYS[5], unpack(owned_ids))
  local scored = {}
  for j = 1, acked do
    results[slots[j]] = tonumber(enqueued[j]) or -1
    scored[2 * j - 1] = now
    scored[2 * j] = owned_ids[j]
  end
  redis.call('ZREM', KEYS[5], unpack(owned_ids))
  redis.call('HDEL', KEYS[6], unpack(owned_ids))
  redis.call('HDEL', KEYS[7], unpack(owned_ids))
  redis.call('HDEL', KEYS[8], unpack(owned_ids))
  redis.call('HDEL', KEYS[9], unpack(owned_ids))
  redis.call('ZADD', KEYS[4], unpack(scored))
end

local keep = tonumber(ARGV[2])
if acked > 0 and keep > 0 then
  local excess = redis.call('ZCARD', KEYS[4]) - keep
  if excess > 0 then
    local oldest = redis.call('ZPOPMIN', KEYS[4], excess)
    for j = 1, #oldest, 2 do redis.call('SREM', KEYS[3], oldest[j]) end
  end
end

local result = cjson.encode({now, results})
redis.call('SET', KEYS[1], result, 'PX', ARGV[1])
return result
