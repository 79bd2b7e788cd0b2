-- includes/released.lua: dependents joining the line. join_released puts jobs just out of waiting
-- in line; drain_released does it for those an ack recorded in released (includes/links.lua's
-- record_sole), at the next claim, sweep, stats or inspect. W (keys): waiting, deps, arrived,
-- released, todos, seq, pending, group_of; G: the groups' keys (includes/groups.lua).
-- @include "groups"

-- DRAIN_MOST: the most recorded releases one call moves to the line: bounds its work however many
-- acks recorded since the last claim (the same number as setqueue.keys.LINKS_PER_CALL).
local DRAIN_MOST = 500

-- join_released: jobs released (out of waiting) join the back of their priority's line (priorities:
-- a table or one number), in their group's if they have one, and pending from now.
local function join_released(W, G, released, priorities, now)
  local release_groups = {}  -- none where no job of the queue has a group (one EXISTS)
  if redis.call('EXISTS', W.group_of) == 1 then
    local groups = redis.call('HMGET', W.group_of, unpack(released))
    for j = 1, #released do release_groups[j] = groups[j] or false end
  end
  join_back(G, W.todos, W.seq, released, priorities, release_groups)
  local joined, now_text = {}, string.format('%d', now)
  for j = 1, #released do
    joined[2 * j - 1], joined[2 * j] = now_text, released[j]
  end
  redis.call('ZADD', W.pending, unpack(joined))
end

-- drain_released: up to DRAIN_MOST releases recorded in released (oldest first: a linked value
-- "<deps entry> <id>", then the id of the dependency of this queue (named queue, as links name it)
-- whose ack recorded it) move their jobs to the line: each that still waits in the run the value
-- names (its deps entry is the value's head; leaving waiting, a ZREM that answers 1 only the first
-- time, is the check that it still waited), with its arrival (done) written as arrive_all would. One
-- cancelled, deleted or sent again since is passed over; so is a second record of the same job.
-- Returns how many joined. One LPOP when none is recorded.
local function drain_released(W, G, queue, now)
  local entries = redis.call('LPOP', W.released, 2 * DRAIN_MOST)
  if not entries then return 0 end
  local ids = {}
  for j = 1, #entries / 2 do
    local value = entries[2 * j - 1]
    ids[j] = string.sub(value, string.find(value, ' ', 1, true) + 1)  -- a deps entry has no space
  end
  local headers = redis.call('HMGET', W.deps, unpack(ids))
  local moved, arrivals = {}, {}
  for j = 1, #ids do
    local id, value, header = ids[j], entries[2 * j - 1], headers[j]
    if header and string.find(value, header, 1, true) == 1 and string.byte(value, #header + 1) == 32
        and redis.call('ZREM', W.waiting, id) == 1 then
      moved[#moved + 1] = id
      arrivals[#arrivals + 1] = id .. '\0' .. queue .. ' ' .. entries[2 * j]
      arrivals[#arrivals + 1] = 'done'
    end
  end
  if #moved == 0 then return 0 end
  redis.call('HSET', W.arrived, unpack(arrivals))
  join_released(W, G, moved, 0, now)
  return #moved
end
