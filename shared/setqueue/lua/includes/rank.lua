-- includes/rank.lua: todos and in_progress are scored by rank = (TOP_PRIORITY - priority) *
-- RANK_BAND + place, lowest claimed first; a place comes from seq when the job joins the line. A job
-- put back through no fault of its own keeps its rank. Ranks stay below 2^53 (exact as a double);
-- never concatenate one into a string (tostring keeps 14 digits): pass it as a number, or as
-- rank_text prints it.
local RANK_BAND = 281474976710656  -- 2^48 places per priority
local TOP_PRIORITY = 10            -- priorities run from -TOP_PRIORITY to TOP_PRIORITY

local function rank_of(priority, place)
  return (TOP_PRIORITY - priority) * RANK_BAND + place
end

-- rank_text: a rank (a number, or a string Redis gave) as the whole number it is, for a command's
-- argument. Exact below 2^53, and a tenth of the work of the %.17g Redis prints a Lua number with.
local function rank_text(rank)
  return string.format('%d', rank)
end

local function priority_of(rank)
  return TOP_PRIORITY - math.floor(tonumber(rank) / RANK_BAND)
end

local function take_places(seq, n)
  return redis.call('INCRBY', seq, n) - n + 1
end

-- join_line: ids join the back of todos in order (priorities: a table or one number).
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
