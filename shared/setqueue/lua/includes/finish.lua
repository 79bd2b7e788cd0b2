-- includes/finish.lua: a finished job (done, failed, cancelled) keeps one finished field,
-- "<enqueued ms>:<finished ms>:<attempts>", plus ":1" if its handler returned a result (so a result
-- dropped for lack of memory can be told from none); attempts drops its entry.
-- @include "rank"
local function finished_record(enqueued_ms, now, attempts, returned)
  local record = (enqueued_ms or '') .. ':' .. now .. ':' .. (attempts or '')
  if returned then record = record .. ':1' end
  return record
end

-- forget_ended: drop ids that done's retention (shared by cancelled) let go, with all kept of them
-- (a done job's payload too). In slices: unpack() has a limit.
local function forget_ended(done, cancelled, finished, results, result_expiry, history, progress, payloads, ids)
  for s = 1, #ids, 1000 do
    local last = math.min(s + 999, #ids)
    redis.call('SREM', done, unpack(ids, s, last))
    redis.call('SREM', cancelled, unpack(ids, s, last))
    redis.call('HDEL', finished, unpack(ids, s, last))
    redis.call('HDEL', results, unpack(ids, s, last))
    redis.call('ZREM', result_expiry, unpack(ids, s, last))
    redis.call('HDEL', history, unpack(ids, s, last))
    redis.call('HDEL', progress, unpack(ids, s, last))
    redis.call('HDEL', payloads, unpack(ids, s, last))
  end
end

-- dead_letter: in_progress -> failed with its reason; its first enqueue time (enqueued, else its
-- pending score) and attempts go into finished, a non-zero priority into priorities, for a requeue.
local function dead_letter(in_progress, failed, pending, enqueued, attempts, errors, finished, priorities,
                           id, reason, now)
  local first = redis.call('HGET', enqueued, id) or redis.call('ZSCORE', pending, id)
  local tries = redis.call('HGET', attempts, id)
  local rank = redis.call('ZSCORE', in_progress, id)
  if rank and priority_of(rank) ~= 0 then redis.call('HSET', priorities, id, priority_of(rank)) end
  redis.call('ZREM', in_progress, id)
  redis.call('SADD', failed, id)
  redis.call('ZREM', pending, id)
  redis.call('HDEL', enqueued, id)
  redis.call('HDEL', attempts, id)
  redis.call('HSET', errors, id, reason)
  redis.call('HSET', finished, id, finished_record(first, now, tries))
end
