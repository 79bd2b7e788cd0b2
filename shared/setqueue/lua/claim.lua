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
-- ARGV[4..] candidate ids
-- Returns a JSON string: [now ms, [[id, attempt, enqueue ms or -1, payload or false], ...]]
local cached = redis.call('GET', KEYS[1])
if cached then return cached end

local t = redis.call('TIME')
local now = t[1] * 1000 + math.floor(t[2] / 1000)

local claimed = {}
for i = 4, #ARGV do
  local id = ARGV[i]
  if redis.call('SMOVE', KEYS[2], KEYS[3], id) == 1 then
    local attempt = redis.call('HINCRBY', KEYS[5], id, 1)
    redis.call('SET', KEYS[i + 4], ARGV[2], 'PX', ARGV[3])
    redis.call('HSET', KEYS[7], id, ARGV[2])
    local enqueued = tonumber(redis.call('ZSCORE', KEYS[4], id)) or -1
    claimed[#claimed + 1] = {id, attempt, enqueued, redis.call('HGET', KEYS[6], id)}
  end
end

local result = cjson.encode({now, claimed})
redis.call('SET', KEYS[1], result, 'PX', ARGV[1])
return result
