#!lua flags=allow-oom
-- register.lua: copy a page of a waiting job's dependencies from its enqueue call's staging list
-- into dep_lines, and register them with them (includes/links.lua).
-- Each dependency of this queue is looked up here: one that ended (or is unknown) arrives at once,
-- one that has not is told to tell this job when it ends (its dependents). Those of other queues
-- are returned, for the caller to register there (depend.lua) and bring their answers (arrive.lua).
-- The last page, with none of those, ends the job's registering entry; so does a call with from
-- "end", once the caller has registered the rest. Idempotent: resent or redone by a cleaner, a
-- dependency registers and arrives once. A job whose staging list is gone before it registered
-- whole (expired, evicted) fails, saying so: it could never learn the rest. A new run of an id whose
-- earlier run is still in forgetting first drops a page of those entries a call.
-- KEYS[1] waiting KEYS[2] deps KEYS[3] linked KEYS[4] registering KEYS[5] releasing
-- KEYS[6] release_outcomes KEYS[7] todos KEYS[8] in_progress KEYS[9] done KEYS[10] failed
-- KEYS[11] cancelled KEYS[12] scheduled KEYS[13] seq KEYS[14] pending KEYS[15] enqueued
-- KEYS[16] priorities KEYS[17] wake KEYS[18] errors KEYS[19] finished KEYS[20] history
-- KEYS[21] limits KEYS[22] grouped KEYS[23] group_lines KEYS[24] group_of KEYS[25] groups_ready
-- KEYS[26] groups_resting KEYS[27] groups_full KEYS[28] dependents KEYS[29] dep_lines KEYS[30] arrived
-- KEYS[31] arrived_count KEYS[32] forgetting
-- KEYS[33] staging (its enqueue call's dependency list: staging:<generation>)
-- ARGV[1] queue (this queue's name, as links name it)  ARGV[2] wake_cap
-- ARGV[3] ended channel ("failed\n<id>...")  ARGV[4] id (the waiting job)
-- ARGV[5] from (place in its dependencies, 0 first; "end": finish)  ARGV[6] page (most per call)
-- ARGV[7] wanted (the generation of the enqueue call whose staging list this is: a job another call made,
-- known already to this one, is not its to register)
-- Returns a JSON string: [next index (-1: no more pages), generation, [links of other queues in
-- this page], [ids whose own dependents are to be told (releasing)], jobs released, jobs failed,
-- [dependencies of this queue whose earlier run is still being forgotten: the caller finishes that,
-- then asks for the same page again]]
local waiting, deps, linked, registering, releasing = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local release_outcomes, todos, in_progress, done, failed = KEYS[6], KEYS[7], KEYS[8], KEYS[9], KEYS[10]
local cancelled, scheduled, seq, pending, enqueued = KEYS[11], KEYS[12], KEYS[13], KEYS[14], KEYS[15]
local priorities, wake, errors, finished, history = KEYS[16], KEYS[17], KEYS[18], KEYS[19], KEYS[20]
local limits, grouped, group_lines, group_of, groups_ready = KEYS[21], KEYS[22], KEYS[23], KEYS[24], KEYS[25]
local groups_resting, groups_full, dependents, dep_lines, arrived = KEYS[26], KEYS[27], KEYS[28], KEYS[29], KEYS[30]
local arrived_count, forgetting, staging = KEYS[31], KEYS[32], KEYS[33]
local queue, wake_cap, ended, id, from, page = ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5], tonumber(ARGV[6])
local wanted = ARGV[7]
-- @include "now_ms"
-- @include "links"

local W = {
  linked = linked, releasing = releasing, release_outcomes = release_outcomes,
  dependents = dependents, dep_lines = dep_lines, arrived = arrived, arrived_count = arrived_count,
  waiting = waiting, deps = deps, todos = todos, in_progress = in_progress, done = done,
  cancelled = cancelled, seq = seq, pending = pending, enqueued = enqueued, scheduled = scheduled,
  priorities = priorities, wake = wake, failed = failed, errors = errors,
  finished = finished, history = history,
  grouped = grouped, group_of = group_of, forgetting = forgetting,
}
local G = {
  limits = limits, grouped = grouped, lines = group_lines, group_of = group_of, ready = groups_ready,
  resting = groups_resting, full = groups_full,
}
local T = {wake_cap = wake_cap, ended = ended, failed_ids = {}, releases = {}, woken = 0}

local header = redis.call('HGET', deps, id)
-- Done with, or no longer waiting (released, failed, cancelled, deleted): nothing left to register.
if from == 'end' or not header or not redis.call('ZSCORE', waiting, id) then
  redis.call('ZREM', registering, id)
  return cjson.encode({-1, '', {}, {}, 0, 0, {}})
end
local count, _, _, generation, priority = deps_header(header)
if generation ~= wanted then return cjson.encode({-1, generation, {}, {}, 0, 0, {}}) end
-- Registered whole already (a sweep that raced its enqueuer, a resent call): nothing to do.
if not redis.call('ZSCORE', registering, id) then return cjson.encode({-1, generation, {}, {}, 0, 0, {}}) end
-- An earlier run of the id, forgotten with its many dependencies, still has entries to drop: a page
-- of them goes now, and the caller asks again from the same place (its own must not mix with them).
if in_forgetting(W, id) then
  forget_page(W, id, page)
  return cjson.encode({tonumber(from), generation, {}, {}, 0, 0, {}})
end
local now = now_ms()
local start = tonumber(from)
-- This page of the list, kept as the job's (in order: its place in 8 hex digits).
local lines = redis.call('LRANGE', staging, start, start + page - 1)
if #lines == 0 and start < count and redis.call('EXISTS', staging) == 0 then
  -- The list is gone with dependencies still to register: its day's TTL ran out before a sweep came
  -- (no cleaner ran meanwhile), or Redis evicted it (a volatile maxmemory policy). The job would wait
  -- for ever: it fails, saying why.
  local reason = 'its dependency list was lost before it was registered (' .. start .. ' of ' .. count
    .. ' registered): the enqueue call\'s staging list expired or was evicted'
  redis.call('ZREM', registering, id)
  fail_waiting_because(W, T, id, redis.call('ZSCORE', waiting, id), priority, reason, now)
  publish_failed(W, T)
  return cjson.encode({-1, generation, {}, T.releases, T.woken, #T.failed_ids, {}})
end
if #lines > 0 then
  local kept = {}
  for j = 1, #lines do
    kept[2 * j - 1] = 0
    kept[2 * j] = dep_line(id, start + j - 1, lines[j])
  end
  redis.call('ZADD', dep_lines, unpack(kept))
end
local dependent = queue .. ' ' .. generation .. ' ' .. id
local sole = sole_entry(header, id)  -- in linked while it is a dependency's only dependent

local elsewhere, arrivals, busy = {}, {}, {}
for j = 1, #lines do
  local link = lines[j]
  local its_queue, dependency = split_link(link)
  if its_queue == queue then
    local outcome = register_with(W, dependency, dependent)
    if outcome == 'busy' then
      busy[#busy + 1] = dependency
    elseif outcome then
      arrivals[#arrivals + 1] = {id, generation, link, outcome}
    else
      note_sole(W, dependency, sole)
    end
  else
    elsewhere[#elsewhere + 1] = link
  end
end
arrive_all(W, G, T, arrivals, now)
publish_failed(W, T)
if #busy > 0 then  -- the caller finishes forgetting those, then asks for this page again
  return cjson.encode({start, generation, {}, T.releases, T.woken, #T.failed_ids, busy})
end
local next_from = start + #lines
if #lines < page then
  next_from = -1
  if #elsewhere == 0 then redis.call('ZREM', registering, id) end
end
return cjson.encode({next_from, generation, elsewhere, T.releases, T.woken, #T.failed_ids, {}})
