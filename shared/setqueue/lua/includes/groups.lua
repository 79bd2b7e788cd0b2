-- includes/groups.lua: job groups. A job enqueued with a group waits in grouped (id -> rank) and in
-- its group's line: the member "<group>\0<rank as 14 hex digits>\0<id>" of group_lines, a zset
-- whose scores are all 0, so that ZRANGE BYLEX reads one group's front in rank order (priority,
-- then first in, first out) without touching any other group's jobs. Jobs without a group wait in
-- todos as before.
--
-- The line of groups: every group with jobs waiting is in exactly one of groups_ready (a zset by
-- turn: claims serve the front and send a group to the back), groups_resting (its rate is used up
-- until the score's time) and groups_full (its concurrency is in progress); a group with no job
-- waiting is in none. While groups take turns, the jobs without a group take one too, as the
-- member "" of groups_ready (claim.lua adds it). group_running counts each group's jobs in
-- progress.
--
-- The scripts call these with G, a table of the keys: flow, grouped, lines, group_of, ready,
-- resting, full, running.
-- @include "rank"
local NO_GROUP = ''  -- the turn of the jobs without a group in groups_ready
local PART = 268435456  -- 2^28: a rank (< 2^53) is written as two 7-digit hex halves

local function line_member(group, rank, id)
  local high = math.floor(rank / PART)
  return group .. '\0' .. string.format('%07x%07x', high, rank - high * PART) .. '\0' .. id
end

-- line_range(group) -> the ZRANGE BYLEX bounds of the group's line
local function line_range(group)
  return '[' .. group .. '\0', '(' .. group .. '\1'
end

-- member_rank(member, group), member_id(member, group): a member of the group's line, read back
local function member_rank(member, group)
  local at = #group + 2
  return tonumber(string.sub(member, at, at + 6), 16) * PART + tonumber(string.sub(member, at + 7, at + 13), 16)
end

local function member_id(member, group)
  return string.sub(member, #group + 17)
end

-- take_turns(G, groups): the groups join the back of groups_ready, in the order given.
local function take_turns(G, groups)
  if #groups == 0 then return end
  local last = redis.call('HINCRBY', G.flow, 'turn', #groups)
  local scored = {}
  for j = 1, #groups do
    scored[2 * j - 1], scored[2 * j] = last - #groups + j, groups[j]
  end
  redis.call('ZADD', G.ready, unpack(scored))
end

-- line_up(G, todos, ids, ranks, groups): the ids join the line at the ranks given (a number each):
-- an id with a group in its group's line (the group takes a turn if none of its jobs was
-- waiting), the others in todos. groups[j] is id j's group (false: none); nil: look them up.
local function line_up(G, todos, ids, ranks, groups)
  if #ids == 0 then return end
  groups = groups or redis.call('HMGET', G.group_of, unpack(ids))
  local plain, grouped, members, starting, seen = {}, {}, {}, {}, {}
  for j = 1, #ids do
    local group, rank = groups[j], ranks[j]
    if group then
      grouped[#grouped + 1] = rank
      grouped[#grouped + 1] = ids[j]
      members[#members + 1] = 0
      members[#members + 1] = line_member(group, rank, ids[j])
      if not seen[group] then
        seen[group] = true
        local low, high = line_range(group)
        if redis.call('ZLEXCOUNT', G.lines, low, high) == 0 then starting[#starting + 1] = group end
      end
    else
      plain[#plain + 1] = rank
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

-- join_back(G, todos, seq, ids, priorities, groups): the ids join the back of their priority's
-- line (priorities: a table, or one number for all), in the order given; as line_up.
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

-- leave_line(G, todos, id): take a waiting id out of the line; whether it was waiting. A group
-- left with no job waiting leaves the line of groups.
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

-- left_progress(G, ids, forget): the ids left in_progress; each group counts its jobs down, and a
-- group that was full takes a turn again. forget: the ids are over (done, cancelled, deleted), so
-- their group is forgotten too. Returns how many groups took a turn (workers to wake). A handful of
-- commands for the whole batch, whatever the number of groups in it.
local function left_progress(G, ids, forget)
  if #ids == 0 then return 0 end
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
