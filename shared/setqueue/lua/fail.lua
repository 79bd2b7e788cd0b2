-- fail.lua: give up on jobs the caller owns. Mode "retry": back to todos while attempts remain,
-- else into failed (the dead-letter set) with the reason kept. Mode "dead": into failed at once.
-- Mode "release": back to todos without using up an attempt (a worker shutting down).
-- Ownership and the claims' locks as in ack.lua; failing a lease that is not owned (stale, or
-- already failed) changes nothing.
--
-- KEYS[1] request record  setqueue:{Q}:req:<request id>
-- KEYS[2] todos   KEYS[3] in_progress   KEYS[4] failed
-- KEYS[5] pending   KEYS[6] attempts   KEYS[7] errors (hash: id -> last failure reason)
-- KEYS[8] wake   KEYS[9] owners (hash: id -> lease token of its current claim)
-- KEYS[10..T+9] lock key setqueue:{Q}:lock:<token> of each claim, in the order of the tokens
-- ARGV[1] request record TTL in ms
-- ARGV[2] max attempts (a job claimed this many times is dead-lettered instead of retried)
-- ARGV[3] wake list cap
-- ARGV[4] T, the number of claims;  ARGV[5..T+4] their tokens
-- ARGV[T+5..] id, claim number (1..T), mode ("retry", "dead" or "release"), reason of each lease
-- Returns a string: the outcome of each lease, space-separated: retried, dead, released or stale
local record = redis.call('GET', KEYS[1])
if record then return record end

local max_attempts = tonumber(ARGV[2])
local claims = tonumber(ARGV[4])
local outcomes, held_less = {}, {}
local retried = 0
for i = claims + 5, #ARGV, 4 do
  local id, c, mode, reason = ARGV[i], tonumber(ARGV[i + 1]), ARGV[i + 2], ARGV[i + 3]
  if redis.call('HGET', KEYS[9], id) ~= ARGV[c + 4] then
    outcomes[#outcomes + 1] = 'stale'
  else
    held_less[c] = (held_less[c] or 0) + 1
    redis.call('HDEL', KEYS[9], id)
    if mode == 'release' then
      redis.call('SMOVE', KEYS[3], KEYS[2], id)
      redis.call('HINCRBY', KEYS[6], id, -1)
      retried = retried + 1
      outcomes[#outcomes + 1] = 'released'
    elseif mode == 'retry' and (tonumber(redis.call('HGET', KEYS[6], id)) or 0) < max_attempts then
      redis.call('HSET', KEYS[7], id, reason)
      redis.call('SMOVE', KEYS[3], KEYS[2], id)
      retried = retried + 1
      outcomes[#outcomes + 1] = 'retried'
    else
      redis.call('HSET', KEYS[7], id, reason)
      redis.call('SMOVE', KEYS[3], KEYS[4], id)
      redis.call('ZREM', KEYS[5], id)
      outcomes[#outcomes + 1] = 'dead'
    end
  end
end

for c, n in pairs(held_less) do
  local lock = KEYS[c + 9]
  -- An expired lock stays gone: DECRBY would re-create it without a TTL.
  if redis.call('EXISTS', lock) == 1 and redis.call('DECRBY', lock, n) <= 0 then redis.call('DEL', lock) end
end

if retried > 0 then
  redis.call('LPUSH', KEYS[8], '1')
  redis.call('LTRIM', KEYS[8], 0, tonumber(ARGV[3]) - 1)
end

record = table.concat(outcomes, ' ')
redis.call('SET', KEYS[1], record, 'PX', ARGV[1])
return record
