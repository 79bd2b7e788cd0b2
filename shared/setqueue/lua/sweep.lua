-- sweep.lua: the cleaner's step. Candidates come from SSCAN in_progress, each with the claim
-- that owned it when the cleaner read owners. An id still in in_progress, still owned by that
-- claim, whose claim's lock is gone (its worker died or hung past the lease) goes back to todos,
-- or into failed once its attempts are used up. An id with a live lock is never touched; an id
-- whose owner changed meanwhile waits for the next sweep; an id another cleaner already moved is
-- no longer in in_progress: so concurrent sweeps are safe. Also drops ids from done that are
-- older than the age retention.
--
-- KEYS[1] request record  setqueue:{Q}:req:<request id>
-- KEYS[2] todos   KEYS[3] in_progress   KEYS[4] failed
-- KEYS[5] pending   KEYS[6] attempts   KEYS[7] errors   KEYS[8] wake
-- KEYS[9] done    KEYS[10] done_log   KEYS[11] owners
-- KEYS[12..T+11] lock key setqueue:{Q}:lock:<token> of each claim, in the order of the tokens
-- ARGV[1] request record TTL in ms
-- ARGV[2] max attempts
-- ARGV[3] wake list cap
-- ARGV[4] done retention age in ms (0 = keep forever)
-- ARGV[5] most ids to drop from done in this call
-- ARGV[6] T, the number of claims;  ARGV[7..T+6] their tokens
-- ARGV[T+7..] candidate id, claim number (1..T, or 0: no owner) of each candidate
-- Returns a JSON string: [[requeued ids], [dead-lettered ids], number of ids dropped from done]
local cached = redis.call('GET', KEYS[1])
if cached then return cached end

local t = redis.call('TIME')
local now = t[1] * 1000 + math.floor(t[2] / 1000)
local max_attempts = tonumber(ARGV[2])
local claims = tonumber(ARGV[6])

local requeued, dead, lock_gone = {}, {}, {}
for i = claims + 7, #ARGV, 2 do
  local id, c = ARGV[i], tonumber(ARGV[i + 1])
  local owner = redis.call('HGET', KEYS[11], id)
  local expected = false
  if c > 0 then expected = ARGV[c + 6] end
  if redis.call('SISMEMBER', KEYS[3], id) == 1 and owner == expected then
    if c > 0 and lock_gone[c] == nil then
      local lock = KEYS[c + 11]
      lock_gone[c] = redis.call('EXISTS', lock) == 0
    end
    if c == 0 or lock_gone[c] then
      redis.call('HDEL', KEYS[11], id)
      local attempts = tonumber(redis.call('HGET', KEYS[6], id)) or 0
      if attempts >= max_attempts then
        redis.call('SMOVE', KEYS[3], KEYS[4], id)
        redis.call('ZREM', KEYS[5], id)
        redis.call('HSET', KEYS[7], id, 'lease expired on attempt ' .. attempts .. ' of ' .. max_attempts)
        dead[#dead + 1] = id
      else
        redis.call('SMOVE', KEYS[3], KEYS[2], id)
        requeued[#requeued + 1] = id
      end
    end
  end
end

if #requeued > 0 then
  redis.call('LPUSH', KEYS[8], '1')
  redis.call('LTRIM', KEYS[8], 0, tonumber(ARGV[3]) - 1)
end

local trimmed = 0
local max_age = tonumber(ARGV[4])
if max_age > 0 then
  local old = redis.call('ZRANGE', KEYS[10], '-inf', now - max_age, 'BYSCORE', 'LIMIT', 0, tonumber(ARGV[5]))
  for j = 1, #old do redis.call('SREM', KEYS[9], old[j]) end
  if #old > 0 then redis.call('ZREM', KEYS[10], unpack(old)) end
  trimmed = #old
end

local result = cjson.encode({requeued, dead, trimmed})
redis.call('SET', KEYS[1], result, 'PX', ARGV[1])
return result
