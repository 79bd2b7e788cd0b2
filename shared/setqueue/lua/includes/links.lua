-- includes/links.lua: dependencies between jobs (docs/reference.md#dependencies).
-- A dependency is named "<queue> <id>" (its queue, or the shard of a sharded queue, that holds it:
-- queue names have no spaces, so the first space splits it); a dependent is registered with its
-- dependency as "<queue> <generation> <id>". Per job, queue-wide keys hold, under "<id>\0": its
-- dependencies in order (dep_lines), those that ended (arrived, counted in arrived_count) and its
-- dependents (dependents); linked lists the ids that have any.
-- L (keys): linked, releasing, release_outcomes, dependents, dep_lines, arrived, arrived_count, deps.
-- W (keys): L's and what arriving needs: waiting, todos, in_progress, done, cancelled, seq, pending,
-- enqueued, scheduled, priorities, wake, failed, errors, finished, history, grouped, group_of.
-- G: the groups' keys (includes/groups.lua). T, a call's tally: wake_cap, ended (the channel), and
-- what it fills: failed_ids (dependents failed now, for the ended channel), releases (ids whose own
-- dependents are to be told), woken (jobs made claimable).
-- @include "groups"
-- @include "wake"
-- @include "finish"
-- @include "history"

-- split_link: "<queue> <rest>" -> queue, rest.
local function split_link(link)
  return string.match(link, '^(%S+) (.*)$')
end

-- lex_range: the bounds of id's entries ("<id>\0...") in a lexicographic sorted set.
local function lex_range(id)
  return '[' .. id .. '\0', '(' .. id .. '\1'
end

-- has_dependents: whether any job waits for id.
local function has_dependents(L, id)
  local low, high = lex_range(id)
  return #redis.call('ZRANGE', L.dependents, low, high, 'BYLEX', 'LIMIT', 0, 1) > 0
end

-- mark_ended: of ids that just ended (outcome: done, failed, cancelled, deleted), those with
-- dependents go into releasing, to be told. Returns them. One EXISTS when the queue has no links.
local function mark_ended(L, ids, outcome, now)
  local told = {}
  if #ids == 0 or redis.call('EXISTS', L.linked) == 0 then return told end
  local member = redis.call('SMISMEMBER', L.linked, unpack(ids))
  for j = 1, #ids do
    if member[j] == 1 and has_dependents(L, ids[j]) then
      redis.call('ZADD', L.releasing, now, ids[j])
      redis.call('HSET', L.release_outcomes, ids[j], outcome)
      told[#told + 1] = ids[j]
    end
  end
  return told
end

-- forget_links: drop the dependency entries of ids the queue forgets (retention, delete, rerun):
-- its dependencies (each one's arrived field too) and, unless they are still being told, its
-- dependents. Work in proportion to its dependencies.
local function forget_links(L, ids)
  if #ids == 0 or redis.call('EXISTS', L.linked) == 0 then return end
  local member = redis.call('SMISMEMBER', L.linked, unpack(ids))
  for j = 1, #ids do
    if member[j] == 1 then
      local id = ids[j]
      local low, high = lex_range(id)
      local lines = redis.call('ZRANGE', L.dep_lines, low, high, 'BYLEX')
      for s = 1, #lines, 1000 do
        local fields = {}
        for n = s, math.min(s + 999, #lines) do
          fields[#fields + 1] = id .. '\0' .. string.match(lines[n], '^[^%z]*%z[^%z]*%z(.*)$')
        end
        redis.call('HDEL', L.arrived, unpack(fields))
      end
      redis.call('ZREMRANGEBYLEX', L.dep_lines, low, high)
      redis.call('HDEL', L.arrived_count, id)
      redis.call('HDEL', L.deps, id)
      if not redis.call('ZSCORE', L.releasing, id) then
        redis.call('ZREMRANGEBYLEX', L.dependents, low, high)
        redis.call('SREM', L.linked, id)
      end
    end
  end
end

-- deps_header: a dependent's deps entry -> count, mode ("fail"/"run"), due ms (nil: at once),
-- generation, priority.
local function deps_header(text)
  local count, mode, due, generation, priority = string.match(text, '^(%d+)|(%a+)|(%d*)|([^|]*)|(-?%d+)$')
  return tonumber(count), mode, tonumber(due), generation, tonumber(priority)
end

-- release_waiting: a dependent whose dependencies all ended goes to the back of its priority's line
-- (or to scheduled, when it was enqueued to run later). Queue wait counts from now; enqueued keeps
-- its enqueue time.
local function release_waiting(W, G, T, id, first_ms, due, priority, now)
  redis.call('ZREM', W.waiting, id)
  redis.call('HSET', W.enqueued, id, first_ms)
  if due and due > now then
    redis.call('ZADD', W.scheduled, due, id)
    if priority ~= 0 then redis.call('HSET', W.priorities, id, priority) end
  else
    local group = redis.call('HGET', W.group_of, id)
    join_back(G, W.todos, W.seq, {id}, priority, {group or false})
    redis.call('ZADD', W.pending, now, id)
  end
  T.woken = T.woken + 1
end

-- fail_waiting: a dependent enqueued with "fail" whose dependency ended otherwise goes to failed with
-- a reason naming it (a requeue runs it regardless); its own dependents are told it failed.
local function fail_waiting(W, T, id, first_ms, priority, link, outcome, now)
  local queue, dependency = split_link(link)
  local reason = 'dependency ' .. dependency .. ' (queue ' .. queue .. ') ended ' .. outcome
  redis.call('ZREM', W.waiting, id)
  redis.call('SADD', W.failed, id)
  redis.call('HSET', W.errors, id, reason)
  redis.call('HSET', W.finished, id, finished_record(first_ms, now, '0', false))
  if priority ~= 0 then redis.call('HSET', W.priorities, id, priority) end
  remember(W.history, id, now, 'failed', 'dependency', reason .. '; dead-lettered')
  T.failed_ids[#T.failed_ids + 1] = id
  local told = mark_ended(W, {id}, 'failed', now)
  if #told > 0 then T.releases[#T.releases + 1] = id end
end

-- arrive: dependency link of waiting job id (of that generation) ended as outcome. Counted once
-- (HSETNX): "fail" mode fails the job at a dependency that did not end done; it is released when its
-- last dependency ended. A job no longer waiting (released, failed, cancelled, deleted, or a new run
-- of the id) ignores it. Returns true when it changed the job.
local function arrive(W, G, T, id, generation, link, outcome, now)
  local header = redis.call('HGET', W.deps, id)
  if not header then return false end
  local first_ms = redis.call('ZSCORE', W.waiting, id)
  if not first_ms then return false end
  local count, mode, due, own_generation, priority = deps_header(header)
  if own_generation ~= generation then return false end
  if redis.call('HSETNX', W.arrived, id .. '\0' .. link, outcome) == 0 then return false end
  local arrived = redis.call('HINCRBY', W.arrived_count, id, 1)
  if outcome ~= 'done' and mode == 'fail' then
    fail_waiting(W, T, id, first_ms, priority, link, outcome, now)
  elseif arrived >= count then
    release_waiting(W, G, T, id, first_ms, due, priority, now)
  end
  return true
end

-- state_of_link: how a job of this queue stands for a dependent registering: "done", "failed" or
-- "cancelled" (ended), "unknown", or false (not ended yet: it will tell when it ends).
local function state_of_link(W, id)
  if redis.call('SISMEMBER', W.done, id) == 1 then return 'done' end
  if redis.call('SISMEMBER', W.failed, id) == 1 then return 'failed' end
  if redis.call('SISMEMBER', W.cancelled, id) == 1 then return 'cancelled' end
  if redis.call('ZSCORE', W.todos, id) or redis.call('ZSCORE', W.in_progress, id)
      or redis.call('ZSCORE', W.scheduled, id) or redis.call('ZSCORE', W.grouped, id)
      or redis.call('ZSCORE', W.waiting, id) then
    return false
  end
  return 'unknown'
end

-- register_with: dependent "<queue> <generation> <id>" waits for job id of this queue: its outcome
-- if it ended (or "unknown"), else false once registered in its dependents (the caller then adds id
-- to linked).
local function register_with(W, id, dependent)
  local state = state_of_link(W, id)
  if state then return state end
  redis.call('ZADD', W.dependents, 0, id .. '\0' .. dependent)
  return false
end

-- publish_failed: the dependents failed in this call go out on ended.
local function publish_failed(W, T)
  if #T.failed_ids > 0 then redis.call('PUBLISH', T.ended, 'failed\n' .. table.concat(T.failed_ids, '\n')) end
  if T.woken > 0 then wake_workers(W.wake, T.woken, T.wake_cap) end
end
