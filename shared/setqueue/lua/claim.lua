-- claim.lua: move candidate ids todos -> in_progress and lock each one, in one step.
-- The candidates come from SRANDMEMBER todos; a candidate that another worker took first is
-- skipped. Because the move and the lock happen in one script, no cleaner can ever see an id in
-- in_progress without its lock.
--
-- KEYS[1] request record  setqueue:{Q}:req:<token>  (a resent call returns the same leases)
-- KEYS[2] todos      KEYS[3] in_progress
-- KEYS[4] pending    (zset: id -> enqueue time in ms)
-- KEYS[5] attempts   (hash: id -> number of claims so far)
-- KEYS[6] payloads   (hash: id -> payload)
-- KEYS[7] owners     (hash: id -> lease token of its current claim)
-- KEYS[8..] lock key setqueue:{Q}:lock:<id> of each candidate, in the order of ARGV[4..]
-- ARGV[1] request record TTL in ms
-- ARGV[2] lease token (random, fresh for every call)
-- ARGV[3] lease duration in ms
-- ARGV[4..] candidate ids (distinct)
-- Returns a JSON string: [now ms, [[id, attempt, enqueue ms or -1, payload or false], ...]]
local cached = redis.call('GET', KEYS[1])
if cached then return cached end

local t = redis.call('TIME')
local now = t[1] * 1000 + math.floor(t[2] / 1000)

local candidates = {}
for i = 4, #ARGV do candidates[#candidates + 1] = ARGV[i] end

-- One command per key for the whole batch, not one per id: in Redis, a call from Lua costs
-- more than the work it does on one member. Only the locks are one key per id.
local present = redis.call('SMISMEMBER', KEYS[2], unpack(candidates))
local moved = {}
for j = 1, #candidates do
  if present[j] == 1 then
    moved[#moved + 1] = candidates[j]
    redis.call('SET', KEYS[7 + j], ARGV[2], 'PX', ARGV[3])
  end
end

local claimed = {}
if #moved > 0 then
  redis.call('SREM', KEYS[2], unpack(moved))
  redis.call('SADD', KEYS[3], unpack(moved))
  local before = redis.call('HMGET', KEYS[5], unpack(moved))
  local counts, owners = {}, {}
  for j = 1, #moved do
    local attempt = (tonumber(before[j]) or 0) + 1
    before[j] = attempt
    counts[2 * j - 1], counts[2 * j] = moved[j], attempt
    owners[2 * j - 1], owners[2 * j] = moved[j], ARGV[2]
  end
  redis.call('HSET', KEYS[5], unpack(counts))
  redis.call('HSET', KEYS[7], unpack(owners))
  local enqueued = redis.call('ZMSCORE', KEYS[4], unpack(moved))
  local payloads = redis.call('HMGET', KEYS[6], unpack(moved))
  for j = 1, #moved do
    claimed[j] = {moved[j], before[j], tonumber(enqueued[j]) or -1, payloads[j]}
  end
end

local result = cjson.encode({now, claimed})
redis.call('SET', KEYS[1], result, 'PX', ARGV[1])
return result
