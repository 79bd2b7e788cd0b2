-- includes/links.lua: dependencies between jobs (docs/reference.md#dependencies).
-- A dependency is named "<queue> <id>" (its queue, or the shard of a sharded queue, that holds it:
-- queue names have no spaces, so the first space splits it); a dependent is registered with its
-- dependency as "<queue> <generation> <id>". Per job, queue-wide keys hold, under "<id>\0": its
-- dependencies in order (dep_lines), those that ended (arrived, counted in arrived_count) and its
-- dependents (dependents); deps has an entry for each id with dependencies, linked one for each id
-- with dependents: "<deps entry> <id>" while its only one is a job of this queue with one dependency,
-- no delay and priority 0 (its release reads nothing more: tell_here), else "*".
-- L (keys): linked, releasing, release_outcomes, dependents, dep_lines, arrived, arrived_count, deps,
-- forgetting.
-- W (keys): L's and what arriving needs: waiting, todos, in_progress, done, cancelled, seq, pending,
-- enqueued, scheduled, priorities, wake, failed, errors, finished, history, grouped, group_of; for an
-- ack, released.
-- G: the groups' keys (includes/groups.lua). T, a call's tally: wake_cap, ended (the channel), and
-- what it fills: failed_ids (dependents failed now, for the ended channel), releases (ids whose own
-- dependents are to be told), woken (jobs made claimable).
-- @include "groups"
-- @include "wake"
-- @include "finish"
-- @include "history"
-- @include "released"

-- split_link: "<queue> <rest>" -> queue, rest.
local function split_link(link)
  return string.match(link, '^(%S+) (.*)$')
end

-- lex_range: the bounds of id's entries ("<id>\0...") in a lexicographic sorted set.
local function lex_range(id)
  return '[' .. id .. '\0', '(' .. id .. '\1'
end

-- mark_ended: of ids that just ended (outcome: done, failed, cancelled, deleted), those with
-- dependents go into releasing, to be told. Returns them. One EXISTS when no job has dependents.
local function mark_ended(L, ids, outcome, now)
  local told = {}
  if #ids == 0 or redis.call('EXISTS', L.linked) == 0 then return told end
  local member = redis.call('HMGET', L.linked, unpack(ids))
  local since, outcomes, now_text = {}, {}, string.format('%d', now)
  for j = 1, #ids do
    if member[j] then
      told[#told + 1] = ids[j]
      since[#since + 1], since[#since + 2] = now_text, ids[j]
      outcomes[#outcomes + 1], outcomes[#outcomes + 2] = ids[j], outcome
    end
  end
  if #told > 0 then
    redis.call('ZADD', L.releasing, unpack(since))
    redis.call('HSET', L.release_outcomes, unpack(outcomes))
  end
  return told
end

-- FORGET_INLINE: the most dependencies of one job whose entries a forgetting call drops itself; a
-- job with more is handed to forgetting, dropped a page a call (forget_page). The same number as
-- setqueue.keys.LINKS_PER_CALL, so that no call does more.
local FORGET_INLINE = 500

-- in_forgetting: whether job id is in forgetting (one EXISTS when no job is).
local function in_forgetting(L, id)
  return redis.call('EXISTS', L.forgetting) == 1 and redis.call('ZSCORE', L.forgetting, id) ~= false
end

-- drop_lines: drop lines, dep_lines entries of job id, and their arrived fields.
local function drop_lines(L, id, lines)
  if #lines == 0 then return end
  -- "<id>\0<place, 8 hex digits>\0<link>" -> its arrived field "<id>\0<link>"
  local head, fields = id .. '\0', {}
  for n = 1, #lines do fields[n] = head .. string.sub(lines[n], #id + 11) end
  redis.call('HDEL', L.arrived, unpack(fields))
  redis.call('ZREM', L.dep_lines, unpack(lines))
end

-- forget_page: drop up to page of the entries of a job in forgetting: its dependencies first
-- (dep_lines and their arrived fields), then its dependents; once none are left, it leaves
-- forgetting. Returns whether it has, and how many entries went.
local function forget_page(L, id, page)
  local low, high = lex_range(id)
  local lines = redis.call('ZRANGE', L.dep_lines, low, high, 'BYLEX', 'LIMIT', '0', string.format('%d', page))
  drop_lines(L, id, lines)
  local members = {}
  if #lines < page then
    members = redis.call('ZRANGE', L.dependents, low, high, 'BYLEX', 'LIMIT', '0', string.format('%d', page - #lines))
    if #members > 0 then redis.call('ZREM', L.dependents, unpack(members)) end
  end
  local dropped = #lines + #members
  if dropped < page then
    redis.call('ZREM', L.forgetting, id)
    return true, dropped
  end
  return false, dropped
end

-- forget_dependents: drop job id's dependents entries (all told) and its linked membership: at once
-- for up to FORGET_INLINE of them, else by forgetting, a page a call.
local function forget_dependents(L, id, now)
  local low, high = lex_range(id)
  local limit = string.format('%d', FORGET_INLINE + 1)
  local members = redis.call('ZRANGE', L.dependents, low, high, 'BYLEX', 'LIMIT', '0', limit)
  if #members > FORGET_INLINE then
    redis.call('ZADD', L.forgetting, string.format('%d', now), id)
  elseif #members > 0 then
    redis.call('ZREM', L.dependents, unpack(members))
  end
  redis.call('HDEL', L.linked, id)
end

-- forget_links: drop the dependency entries of ids the queue forgets (retention, delete, rerun):
-- its dependencies (each one's arrived field too) and its dependents, or, while they are still being
-- told, mark its release_outcomes entry " forgotten" for release.lua to drop them when done. A job
-- with more than FORGET_INLINE of either goes into forgetting instead, its entries dropped a page a
-- call. One EXISTS each for deps and linked when no job has any.
local function forget_links(L, ids, now)
  if #ids == 0 then return end
  if redis.call('EXISTS', L.deps) == 1 then
    local headers = redis.call('HMGET', L.deps, unpack(ids))
    for j = 1, #ids do
      if headers[j] then
        local id = ids[j]
        if tonumber(string.match(headers[j], '^(%d+)')) > FORGET_INLINE then
          redis.call('ZADD', L.forgetting, string.format('%d', now), id)
        else
          local low, high = lex_range(id)
          drop_lines(L, id, redis.call('ZRANGE', L.dep_lines, low, high, 'BYLEX'))
        end
        redis.call('HDEL', L.arrived_count, id)
        redis.call('HDEL', L.deps, id)
      end
    end
  end
  if redis.call('EXISTS', L.linked) == 0 then return end
  local member = redis.call('HMGET', L.linked, unpack(ids))
  for j = 1, #ids do
    if member[j] then
      local id = ids[j]
      local telling = redis.call('HGET', L.release_outcomes, id)
      if telling then  -- its dependents are still being told: release.lua drops them when done
        if not string.find(telling, ' ', 1, true) then
          redis.call('HSET', L.release_outcomes, id, telling .. ' forgotten')
        end
      else
        forget_dependents(L, id, now)
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

-- fail_waiting_because: a waiting job goes to failed, with reason (a requeue runs it regardless);
-- its own dependents are told it failed.
local function fail_waiting_because(W, T, id, first_ms, priority, reason, now)
  redis.call('ZREM', W.waiting, id)
  redis.call('HDEL', W.enqueued, id)
  redis.call('SADD', W.failed, id)
  redis.call('HSET', W.errors, id, reason)
  redis.call('HSET', W.finished, id, finished_record(first_ms, now, '0', false))
  if priority ~= 0 then redis.call('HSET', W.priorities, id, priority) end
  remember(W.history, id, now, 'failed', 'dependency', reason .. '; dead-lettered')
  T.failed_ids[#T.failed_ids + 1] = id
  local told = mark_ended(W, {id}, 'failed', now)
  if #told > 0 then T.releases[#T.releases + 1] = id end
end

-- fail_waiting: a dependent enqueued with "fail" whose dependency ended otherwise goes to failed with
-- a reason naming it.
local function fail_waiting(W, T, id, first_ms, priority, link, outcome, now)
  local queue, dependency = split_link(link)
  local reason = 'dependency ' .. dependency .. ' (queue ' .. queue .. ') ended ' .. outcome
  fail_waiting_because(W, T, id, first_ms, priority, reason, now)
end

-- arrive_all: each arrival {id, generation, link, outcome}: dependency link of waiting job id (of
-- that generation) ended as outcome. Each counts once (an arrived field is written only where there
-- was none): "fail" mode fails the job at a dependency that did not end done; it is released when
-- its last dependency ended. A job no longer waiting (released, failed, cancelled, deleted, or a new
-- run of the id) ignores it. One command per key for the whole batch, as an ack does: the jobs that
-- only count an arrival, and those released to the line, cost no command of their own.
local function arrive_all(W, G, T, arrivals, now)
  if #arrivals == 0 or redis.call('EXISTS', W.waiting) == 0 then return end
  local ids, fields = {}, {}
  for j = 1, #arrivals do
    ids[j] = arrivals[j][1]
    fields[j] = arrivals[j][1] .. '\0' .. arrivals[j][3]
  end
  local headers = redis.call('HMGET', W.deps, unpack(ids))
  local since = redis.call('ZMSCORE', W.waiting, unpack(ids))
  -- Which count: a job still waiting, of that generation. One with a single dependency that still
  -- waits has had no arrival yet, so only the arrivals of jobs with several are looked up.
  local parsed, asked, asked_ids = {}, {}, {}
  for j = 1, #arrivals do
    if headers[j] and since[j] then
      local count, mode, due, generation, priority = deps_header(headers[j])
      if generation == arrivals[j][2] then
        parsed[j] = {count, mode, due, priority}
        if count > 1 then
          asked[#asked + 1] = fields[j]
          asked_ids[#asked_ids + 1] = ids[j]
          parsed[j][5] = #asked
        end
      end
    end
  end
  local had, counted = {}, {}
  if #asked > 0 then
    had = redis.call('HMGET', W.arrived, unpack(asked))
    counted = redis.call('HMGET', W.arrived_count, unpack(asked_ids))
  end
  local new_fields, seen, count_of, order = {}, {}, {}, {}
  local released, release_priority = {}, {}
  local failing, ended = {}, {}
  for j = 1, #arrivals do
    local p = parsed[j]
    local id, link, outcome = ids[j], arrivals[j][3], arrivals[j][4]
    if p and not (p[5] and had[p[5]]) and not seen[fields[j]] and not ended[id] then
      local count, mode, due, priority = p[1], p[2], p[3], p[4]
      seen[fields[j]] = true
      new_fields[#new_fields + 1] = fields[j]
      new_fields[#new_fields + 1] = outcome
      if not count_of[id] then
        count_of[id] = p[5] and tonumber(counted[p[5]]) or 0
        order[#order + 1] = id
      end
      count_of[id] = count_of[id] + 1
      if outcome ~= 'done' and mode == 'fail' then
        ended[id] = true
        failing[id] = {since[j], priority, link, outcome}
      elseif count_of[id] >= count then
        ended[id] = true
        if due and due > now then  -- due later: scheduled, one by one (rare)
          redis.call('ZADD', W.scheduled, due, id)
          if priority ~= 0 then redis.call('HSET', W.priorities, id, priority) end
          redis.call('ZREM', W.waiting, id)
          T.woken = T.woken + 1
        else
          released[#released + 1] = id
          release_priority[#release_priority + 1] = priority
        end
      end
    end
  end
  if #new_fields == 0 then return end
  redis.call('HSET', W.arrived, unpack(new_fields))
  -- The count matters only while a job waits: kept for those still waiting, dropped for the others.
  local counts, done_counting = {}, {}
  for j = 1, #order do
    if ended[order[j]] then
      done_counting[#done_counting + 1] = order[j]
    else
      counts[#counts + 1] = order[j]
      counts[#counts + 1] = string.format('%d', count_of[order[j]])
    end
  end
  if #counts > 0 then redis.call('HSET', W.arrived_count, unpack(counts)) end
  if #done_counting > 0 and #asked > 0 then redis.call('HDEL', W.arrived_count, unpack(done_counting)) end
  if #released > 0 then
    redis.call('ZREM', W.waiting, unpack(released))
    join_released(W, G, released, release_priority, now)
    T.woken = T.woken + #released
  end
  for j = 1, #order do
    local why = failing[order[j]]
    if why then fail_waiting(W, T, order[j], why[1], why[2], why[3], why[4], now) end
  end
end

-- record_sole: the jobs ids[j] that linked values[j] ("<deps entry> <id>", sole_entry) name as the
-- only dependents of jobs acked[j] of this queue, which an ack just ended done: each such job (one
-- dependency, no delay, priority 0) is released at the cost of one RPUSH for the batch. Recorded in
-- released (the value, then the dependency's id), it moves to the line at the next claim or sweep
-- (includes/released.lua: there it is checked to still wait in the run the value names, and its
-- arrival is written); the workers are woken for it now.
local function record_sole(W, T, ids, values, acked)
  if #ids == 0 then return end
  local recorded = {}
  for j = 1, #ids do
    recorded[2 * j - 1], recorded[2 * j] = values[j], acked[j]
  end
  redis.call('RPUSH', W.released, unpack(recorded))
  T.woken = T.woken + #ids
end

-- tell_here: of ids an ack just ended done, those with dependents tell them in this call when they
-- fit in room (a budget of dependents for the call): those waiting in this queue arrive here and
-- now, no record, no second call; a sole dependent of this queue, named in linked, is recorded for
-- the next claim without reading dependents (record_sole). A job with dependents elsewhere, or too
-- many, goes into releasing as mark_ended puts it, for the caller to tell (release.lua). Returns those, one string
-- each: "<id>" (too many: the caller reads them from the start), or "<id>\0<dependent>\0..." with its
-- dependents of other queues read here ("<queue> <generation> <id>", for arrive.lua there; the
-- caller then only finishes it).
local function tell_here(W, G, T, ids, queue, room, now)
  if #ids == 0 or redis.call('EXISTS', W.linked) == 0 then return {} end
  local member = redis.call('HMGET', W.linked, unpack(ids))
  local arrivals, later, later_ids = {}, {}, {}
  local sole_ids, sole_values, sole_of = {}, {}, {}
  for j = 1, #ids do
    local sole = member[j]
    if sole and sole ~= '*' and room > 0 then  -- "<deps entry> <id>": its only dependent, of this queue
      room = room - 1
      local n = #sole_ids + 1
      sole_ids[n] = string.sub(sole, string.find(sole, ' ', 1, true) + 1)  -- a deps entry has no space
      sole_values[n], sole_of[n] = sole, ids[j]
    elseif sole then
      local id = ids[j]
      local low, high = lex_range(id)
      -- Counts as text: Redis prints a Lua number with %.17g, ten times the work of %d.
      local members = redis.call('ZRANGE', W.dependents, low, high, 'BYLEX', 'LIMIT', '0', string.format('%d', room + 1))
      if #members <= room then
        room = room - #members
        local link, elsewhere = queue .. ' ' .. id, {}
        for m = 1, #members do
          -- "<id>\0<queue> <generation> <dependent id>": one match, no copies on the way
          local its_queue, generation, dependent_id = string.match(members[m], '%z(%S+) (%S+) (.*)$')
          if its_queue == queue then
            arrivals[#arrivals + 1] = {dependent_id, generation, link, 'done'}
          else
            elsewhere[#elsewhere + 1] = string.sub(members[m], #id + 2)
          end
        end
        if #elsewhere > 0 then
          later_ids[#later_ids + 1] = id
          later[#later + 1] = id .. '\0' .. table.concat(elsewhere, '\0')
        end
      else
        later_ids[#later_ids + 1] = id
        later[#later + 1] = id
      end
    end
  end
  record_sole(W, T, sole_ids, sole_values, sole_of)
  arrive_all(W, G, T, arrivals, now)
  if #later == 0 then return later end
  local since, outcomes, now_text = {}, {}, string.format('%d', now)
  for j = 1, #later_ids do
    since[2 * j - 1], since[2 * j] = now_text, later_ids[j]
    outcomes[2 * j - 1], outcomes[2 * j] = later_ids[j], 'done'
  end
  redis.call('ZADD', W.releasing, unpack(since))
  redis.call('HSET', W.release_outcomes, unpack(outcomes))
  return later
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

-- being_forgotten: whether the entries of an earlier run of job id are still being dropped: it is
-- in forgetting, or was forgotten while its dependents were still being told (release_outcomes says
-- " forgotten"). A dependent must not register with its new run until they are gone: it would be
-- dropped, or told, with them.
local function being_forgotten(W, id)
  if in_forgetting(W, id) then return true end
  local telling = redis.call('HGET', W.release_outcomes, id)
  return telling and string.find(telling, ' forgotten', 1, true) ~= nil
end

-- standing_of: how job id of this queue stands for a dependent about to register with it (read
-- only): its outcome if it ended (or "unknown"); "busy" while an earlier run of id is still being
-- forgotten (the dependent must not register until that is done); else false (it tells when it ends).
local function standing_of(W, id)
  local state = state_of_link(W, id)
  if state then return state end
  if being_forgotten(W, id) then return 'busy' end
  return false
end

-- wait_on: dependent "<queue> <generation> <id>" goes into the dependents of job id of this queue,
-- which stands false (standing_of): told when it ends. The caller then writes id's linked field
-- (note_sole, or "*" for a dependent of another queue).
local function wait_on(W, id, dependent)
  redis.call('ZADD', W.dependents, 0, id .. '\0' .. dependent)
end

-- register_with: dependent "<queue> <generation> <id>" waits for job id of this queue: its standing
-- (standing_of), having registered when that is false ("busy": nothing written, the caller finishes
-- the forgetting and asks again).
local function register_with(W, id, dependent)
  local standing = standing_of(W, id)
  if standing == false then wait_on(W, id, dependent) end
  return standing
end

-- dep_line: the dep_lines entry of job id's dependency link at place (0 first): "<id>\0<place, 8 hex
-- digits>\0<link>", so that a lexicographic range lists them in order.
local function dep_line(id, place, link)
  return id .. '\0' .. string.format('%08x', place) .. '\0' .. link
end

-- sole_entry: what linked holds for a dependency of waiting job id, deps entry header, while id is
-- its only dependent: "<deps entry> <id>" for a job whose release record_sole records (one
-- dependency, no delay, priority 0: "1|<mode>||<generation>|0"), else "*".
local function sole_entry(header, id)
  if string.find(header, '^1|%a+||[^|]*|0$') then return header .. ' ' .. id end
  return '*'
end

-- note_sole: a dependent of this queue, sole (sole_entry), registered with job id: linked names it
-- while it is id's only one; a second (not the same one sent again) makes it "*", read them all
-- from dependents.
local function note_sole(W, id, sole)
  if redis.call('HSETNX', W.linked, id, sole) == 1 then return end
  local named = redis.call('HGET', W.linked, id)
  if named ~= sole and named ~= '*' then redis.call('HSET', W.linked, id, '*') end
end

-- publish_failed: the dependents failed in this call go out on ended.
local function publish_failed(W, T)
  if #T.failed_ids > 0 then redis.call('PUBLISH', T.ended, 'failed\n' .. table.concat(T.failed_ids, '\n')) end
  if T.woken > 0 then wake_workers(W.wake, T.woken, T.wake_cap) end
end
