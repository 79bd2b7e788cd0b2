-- claim.lua: draw up to N random ids from todos, move them to in_progress and lease them, in one
-- step. One lease covers the whole claim: its lock key, named after the claim's token, holds the
-- number of the claim's jobs still held and carries the TTL. Because the move and the lock happen
-- in one script, no cleaner can ever see a claimed id in in_progress without its lock.
--
-- KEYS[1] request record  setqueue:{Q}:req:<token>  (a resent call returns the same leases)
-- KEYS[2] todos      KEYS[3] in_progress
-- KEYS[4] pending    (zset: id -> enqueue time in ms)
-- KEYS[5] attempts   (hash: id -> number of claims so far)
-- KEYS[6] payloads   (hash: id -> payload)
-- KEYS[7] owners     (hash: id -> lease token of its current claim)
-- KEYS[8] lock       setqueue:{Q}:lock:<token>  (string: jobs of this claim still held; TTL = lease)
-- ARGV[1] request record TTL in ms
-- ARGV[2] lease token (random, fresh for every call)
-- ARGV[3] lease duration in ms
-- ARGV[4] most ids to claim
-- Returns an array: now ms, then id, attempt, enqueue ms (-1 if unknown), payload (nil if none)
-- for each claimed id. A resend returns the ids of the first call that this claim still owns.
local t = redis.call('TIME')
local now = t[1] * 1000 + math.floor(t[2] / 1000)

local ids, attempts = {}, {}
local record = redis.call('GET', KEYS[1])
if record then
  -- A resend: the record lists the ids the first call claimed (ids hold no line breaks).
  local listed = {}
  for id in string.gmatch(record, '[^\n]+') do listed[#listed + 1] = id end
  if #listed > 0 then
    local owner = redis.call('HMGET', KEYS[7], unpack(listed))
    for j = 1, #listed do
      if owner[j] == ARGV[2] then ids[#ids + 1] = listed[j] end
    end
  end
  if #ids > 0 then attempts = redis.call('HMGET', KEYS[5], unpack(ids)) end
else
  ids = redis.call('SPOP', KEYS[2], tonumber(ARGV[4]))
  -- One command per key for the whole batch: a call from Lua costs more than its work on one id.
  if #ids > 0 then
    redis.call('SADD', KEYS[3], unpack(ids))
    local before = redis.call('HMGET', KEYS[5], unpack(ids))
    local counts, owners = {}, {}
    for j = 1, #ids do
      attempts[j] = (tonumber(before[j]) or 0) + 1
      counts[2 * j - 1], counts[2 * j] = ids[j], attempts[j]
      owners[2 * j - 1], owners[2 * j] = ids[j], ARGV[2]
    end
    redis.call('HSET', KEYS[5], unpack(counts))
    redis.call('HSET', KEYS[7], unpack(owners))
    redis.call('SET', KEYS[8], #ids, 'PX', ARGV[3])
  end
  redis.call('SET', KEYS[1], table.concat(ids, '\n'), 'PX', ARGV[1])
end

local reply = {now}
if #ids > 0 then
  local enqueued = redis.call('ZMSCORE', KEYS[4], unpack(ids))
  local payloads = redis.call('HMGET', KEYS[6], unpack(ids))
  for j = 1, #ids do
    reply[#reply + 1] = ids[j]
    reply[#reply + 1] = tonumber(attempts[j])
    reply[#reply + 1] = tonumber(enqueued[j]) or -1
    reply[#reply + 1] = payloads[j]
  end
end
return reply
