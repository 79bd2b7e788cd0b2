-- includes/rank.lua: the order of todos. todos and in_progress are zsets scored by a job's rank,
-- rank = (TOP_PRIORITY - priority) * RANK_BAND + place: the lowest rank is claimed first, so a
-- higher priority always comes first and, within a priority, the smaller place. A place is a number
-- from the queue's seq counter, taken when the job joins the line (enqueue, becoming due, a retry),
-- so within a priority jobs are claimed in the order they joined. A job put back without its fault
-- (lease lost, handed back, released at shutdown) keeps its rank. Ranks stay below 2^53: exact in a
-- double, as zset scores and Lua numbers are. Never concatenate a rank into a string (Lua's
-- tostring keeps 14 digits); pass it to redis.call as a number.
local RANK_BAND = 281474976710656  -- 2^48 places per priority
local TOP_PRIORITY = 10            -- priorities run from -TOP_PRIORITY to TOP_PRIORITY

local function rank_of(priority, place)
  return (TOP_PRIORITY - priority) * RANK_BAND + place
end

local function priority_of(rank)
  return TOP_PRIORITY - math.floor(tonumber(rank) / RANK_BAND)
end

-- take_places(seq, n): the first of n fresh consecutive places from the seq counter.
local function take_places(seq, n)
  return redis.call('INCRBY', seq, n) - n + 1
end

-- join_line(todos, seq, ids, priorities): ids join the back of todos in the order given, ids[j] with
-- priorities[j] (a table, or one number for all). One ZADD for the batch.
local function join_line(todos, seq, ids, priorities)
  if #ids == 0 then return end
  local first = take_places(seq, #ids)
  local ranked = {}
  for j = 1, #ids do
    local priority = priorities
    if type(priorities) == 'table' then priority = priorities[j] end
    ranked[2 * j - 1] = rank_of(priority, first + j - 1)
    ranked[2 * j] = ids[j]
  end
  redis.call('ZADD', todos, unpack(ranked))
end
