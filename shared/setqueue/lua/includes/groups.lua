-- includes/groups.lua: job groups. A grouped waiting job is in grouped (id -> rank) and in its
-- group's line: member "<group>\0<rank, 14 hex>\0<id>" of group_lines (scores 0), so ZRANGE BYLEX
-- reads one group's front in rank order without touching others. Each group with jobs waiting is in
-- one of groups_ready (by turn: claims take an equal share from the front and send it to the back,
-- so a big backlog cannot starve a small group), groups_resting (rate used up until the score) or
-- groups_full (concurrency in progress). Ungrouped jobs take turns as member "". G: the keys.
-- @include "rank"
local NO_GROUP = ''  -- the ungrouped jobs' turn in groups_ready
local PART = 268435456  -- 2^28: a rank (< 2^53) is written as two 7-digit hex halves

local function line_member(group, rank, id)
  local high = math.floor(rank / PART)
  return group .. '\0' .. string.format('%07x%07x', high, rank - high * PART) .. '\0' .. id
end

local function line_range(group)
  return '[' .. group .. '\0', '(' .. group .. '\1'
end

local function member_rank(member, group)
  local at = #group + 2
  return tonumber(string.sub(member, at, at + 6), 16) * PART + tonumber(string.sub(member, at + 7, at + 13), 16)
end

local function member_id(member, group)
  return string.sub(member, #group + 17)
end

local function take_turns(G, groups)
  if #groups == 0 then return end
  local last = redis.call('HINCRBY', G.limits, 'turn', #groups)
  local scored = {}
  for j = 1, #groups do
    scored[2 * j - 1], scored[2 * j] = last - #groups + j, groups[j]
  end
  redis.call('ZADD', G.ready, unpack(scored))
end

-- line_up: ids join at their ranks, grouped ones in their group's line (a group with none waiting
-- takes a turn). groups[j]: id j's group (false: none; nil: look up).
local function line_up(G, todos, ids, ranks, groups)
  if #ids == 0 then return end
  groups = groups or redis.call('HMGET', G.group_of, unpack(ids))
  local plain, grouped, members, starting, seen = {}, {}, {}, {}, {}
  for j = 1, #ids do
    local group, rank = groups[j], ranks[j]
    if group then
      grouped[#grouped + 1] = rank_text(rank)
      grouped[#grouped + 1] = ids[j]
      members[#members + 1] = 0
      members[#members + 1] = line_member(group, rank, ids[j])
      if not seen[group] then
        seen[group] = true
        local low, high = line_range(group)
        if redis.call('ZLEXCOUNT', G.lines, low, high) == 0 then starting[#starting + 1] = group end
      end
    else
      plain[#plain + 1] = rank_text(rank)
      plain[#plain + 1] = ids[j]
    end
  end
  if #plain > 0 then redis.call('ZADD', todos, unpack(plain)) end
  if #grouped > 0 then
    redis.call('ZADD', G.grouped, unpack(grouped))
    redis.call('ZADD', G.lines, unpack(members))
    take_turns(G, starting)
  end
end

-- join_back: to the back of their priority's line (priorities: a table or one number).
local function join_back(G, todos, seq, ids, priorities, groups)
  if #ids == 0 then return end
  local first = take_places(seq, #ids)
  local ranks = {}
  for j = 1, #ids do
    local priority = priorities
    if type(priorities) == 'table' then priority = priorities[j] end
    ranks[j] = rank_of(priority, first + j - 1)
  end
  line_up(G, todos, ids, ranks, groups)
end

-- leave_line: whether the id was waiting (now out); an emptied group leaves the line of groups.
local function leave_line(G, todos, id)
  if redis.call('ZREM', todos, id) == 1 then return true end
  local rank = redis.call('ZSCORE', G.grouped, id)
  if not rank then return false end
  local group = redis.call('HGET', G.group_of, id)
  redis.call('ZREM', G.grouped, id)
  redis.call('ZREM', G.lines, line_member(group, tonumber(rank), id))
  local low, high = line_range(group)
  if redis.call('ZLEXCOUNT', G.lines, low, high) == 0 then
    redis.call('ZREM', G.ready, group)
    redis.call('ZREM', G.resting, group)
    redis.call('SREM', G.full, group)
  end
  return true
end

-- left_progress: groups count their jobs down, a full one takes a turn again; forget: drop their
-- group too. Returns how many groups took a turn (to wake).
local function left_progress(G, ids, forget)
  if #ids == 0 or redis.call('EXISTS', G.group_of) == 0 then return 0 end  -- no job has a group
  local groups = redis.call('HMGET', G.group_of, unpack(ids))
  local count, order, had = {}, {}, {}
  for j = 1, #ids do
    local group = groups[j]
    if group then
      if not count[group] then
        count[group] = 0
        order[#order + 1] = group
      end
      count[group] = count[group] + 1
      had[#had + 1] = ids[j]
    end
  end
  if #order == 0 then return 0 end
  local before = redis.call('HMGET', G.running, unpack(order))
  local still, idle = {}, {}
  for j, group in ipairs(order) do
    local left = (tonumber(before[j]) or 0) - count[group]
    if left > 0 then
      still[#still + 1] = group
      still[#still + 1] = left
    else
      idle[#idle + 1] = group
    end
  end
  if #still > 0 then redis.call('HSET', G.running, unpack(still)) end
  if #idle > 0 then redis.call('HDEL', G.running, unpack(idle)) end
  local freed = {}
  if redis.call('EXISTS', G.full) == 1 then
    local was_full = redis.call('SMISMEMBER', G.full, unpack(order))
    for j, group in ipairs(order) do
      if was_full[j] == 1 then freed[#freed + 1] = group end
    end
    if #freed > 0 then redis.call('SREM', G.full, unpack(freed)) end
    take_turns(G, freed)
  end
  if forget then redis.call('HDEL', G.group_of, unpack(had)) end
  return #freed
end
