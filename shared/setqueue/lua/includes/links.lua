-- includes/links.lua: dependencies between jobs (docs/reference.md#dependencies).
-- A dependency is named "<queue> <id>" (its queue, or the shard of a sharded queue, that holds it:
-- queue names have no spaces, so the first space splits it); a dependent is registered in its
-- dependency's dependents set as "<queue> <generation> <id>". Per-job keys hang off the queue's key
-- prefix P, so they share its hash tag and slot: P..'depends_on:'..id (list), P..'arrived:'..id
-- (hash), P..'dependents:'..id (set); linked lists the ids that have any.
-- L: prefix, linked, releasing, release_outcomes. W: L's keys and what arriving needs: waiting, deps,
-- todos, in_progress, done, cancelled, seq, pending, enqueued, scheduled, priorities, wake, wake_cap, failed, errors, finished,
-- history, ended (channel), G (the groups' keys, includes/groups.lua), and the lists it fills:
-- W.failed_ids (dependents failed now, for the ended channel), W.releases (ids whose own dependents
-- are to be told), W.woken (jobs made claimable).
-- @include "groups"
-- @include "wake"
-- @include "finish"
-- @include "history"

-- split_link: "<queue> <rest>" -> queue, rest.
local function split_link(link)
  return string.match(link, '^(%S+) (.*)$')
end

-- mark_ended: of ids that just ended (outcome: done, failed, cancelled, deleted), those with
-- dependents go into releasing, to be told. Returns them. One EXISTS when the queue has no links.
local function mark_ended(L, ids, outcome, now)
  local told = {}
  if #ids == 0 or redis.call('EXISTS', L.linked) == 0 then return told end
  local member = redis.call('SMISMEMBER', L.linked, unpack(ids))
  for j = 1, #ids do
    if member[j] == 1 and redis.call('EXISTS', L.prefix .. 'dependents:' .. ids[j]) == 1 then
      redis.call('ZADD', L.releasing, now, ids[j])
      redis.call('HSET', L.release_outcomes, ids[j], outcome)
      told[#told + 1] = ids[j]
    end
  end
  return told
end

-- forget_links: drop the dependency keys of ids the queue forgets (retention, delete, rerun). A
-- dependents set still being told stays until release.lua finishes with it.
local function forget_links(L, deps, ids)
  if #ids == 0 or redis.call('EXISTS', L.linked) == 0 then return end
  local member = redis.call('SMISMEMBER', L.linked, unpack(ids))
  for j = 1, #ids do
    if member[j] == 1 then
      local id = ids[j]
      redis.call('DEL', L.prefix .. 'depends_on:' .. id, L.prefix .. 'arrived:' .. id)
      redis.call('HDEL', deps, id)
      if not redis.call('ZSCORE', L.releasing, id) then
        redis.call('DEL', L.prefix .. 'dependents:' .. id)
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
local function release_waiting(W, id, first_ms, due, priority, now)
  redis.call('ZREM', W.waiting, id)
  redis.call('HSET', W.enqueued, id, first_ms)
  if due and due > now then
    redis.call('ZADD', W.scheduled, due, id)
    if priority ~= 0 then redis.call('HSET', W.priorities, id, priority) end
  else
    local group = redis.call('HGET', W.G.group_of, id)
    join_back(W.G, W.todos, W.seq, {id}, priority, {group or false})
    redis.call('ZADD', W.pending, now, id)
  end
  W.woken = W.woken + 1
end

-- fail_waiting: a dependent enqueued with "fail" whose dependency ended otherwise goes to failed with
-- a reason naming it (a requeue runs it regardless); its own dependents are told it failed.
local function fail_waiting(W, id, first_ms, priority, link, outcome, now)
  local queue, dependency = split_link(link)
  local reason = 'dependency ' .. dependency .. ' (queue ' .. queue .. ') ended ' .. outcome
  redis.call('ZREM', W.waiting, id)
  redis.call('SADD', W.failed, id)
  redis.call('HSET', W.errors, id, reason)
  redis.call('HSET', W.finished, id, finished_record(first_ms, now, '0', false))
  if priority ~= 0 then redis.call('HSET', W.priorities, id, priority) end
  remember(W.history, id, now, 'failed', 'dependency', reason .. '; dead-lettered')
  W.failed_ids[#W.failed_ids + 1] = id
  local told = mark_ended(W, {id}, 'failed', now)
  if #told > 0 then W.releases[#W.releases + 1] = id end
end

-- arrive: dependency link of waiting job id (of that generation) ended as outcome. Counted once
-- (HSETNX): "fail" mode fails the job at a dependency that did not end done; it is released when its
-- last dependency ended. A job no longer waiting (released, failed, cancelled, deleted, or a new run
-- of the id) ignores it. Returns true when it changed the job.
local function arrive(W, id, generation, link, outcome, now)
  local header = redis.call('HGET', W.deps, id)
  if not header then return false end
  local first_ms = redis.call('ZSCORE', W.waiting, id)
  if not first_ms then return false end
  local count, mode, due, own_generation, priority = deps_header(header)
  if own_generation ~= generation then return false end
  local arrived = W.prefix .. 'arrived:' .. id
  if redis.call('HSETNX', arrived, link, outcome) == 0 then return false end
  if outcome ~= 'done' and mode == 'fail' then
    fail_waiting(W, id, first_ms, priority, link, outcome, now)
  elseif redis.call('HLEN', arrived) >= count then
    release_waiting(W, id, first_ms, due, priority, now)
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
      or redis.call('ZSCORE', W.scheduled, id) or redis.call('ZSCORE', W.G.grouped, id)
      or redis.call('ZSCORE', W.waiting, id) then
    return false
  end
  return 'unknown'
end

-- register_with: dependent "<queue> <generation> <id>" waits for job id of this queue: its outcome
-- if it ended (or "unknown"), else false once registered in its dependents.
local function register_with(W, id, dependent)
  local state = state_of_link(W, id)
  if state then return state end
  redis.call('SADD', W.prefix .. 'dependents:' .. id, dependent)
  redis.call('SADD', W.linked, id)
  return false
end

-- publish_failed: the dependents failed in this call go out on ended.
local function publish_failed(W)
  if #W.failed_ids > 0 then redis.call('PUBLISH', W.ended, 'failed\n' .. table.concat(W.failed_ids, '\n')) end
  if W.woken > 0 then wake_workers(W.wake, W.woken, W.wake_cap) end
end
