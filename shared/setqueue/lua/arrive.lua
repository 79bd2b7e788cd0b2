#!lua flags=allow-oom
-- arrive.lua: dependencies of jobs of this queue, in other queues, ended (includes/links.lua): each
-- counts once for its dependent, which fails ("fail" mode, a dependency that did not end done) or is
-- released when it was the last. Idempotent: a resent or repeated arrival is ignored.
-- KEYS[1] waiting KEYS[2] deps KEYS[3] linked KEYS[4] releasing KEYS[5] release_outcomes
-- KEYS[6] todos KEYS[7] seq KEYS[8] pending KEYS[9] enqueued KEYS[10] scheduled KEYS[11] priorities
-- KEYS[12] wake KEYS[13] failed KEYS[14] errors KEYS[15] finished KEYS[16] history KEYS[17] limits
-- KEYS[18] grouped KEYS[19] group_lines KEYS[20] group_of KEYS[21] groups_ready
-- KEYS[22] groups_resting KEYS[23] groups_full KEYS[24] dependents KEYS[25] arrived
-- KEYS[26] arrived_count
-- ARGV[1] wake_cap  ARGV[2] ended channel ("failed\n<id>...")
-- ARGV[ARRIVALS..] per arrival: dependent id, its generation, the dependency's link ("<queue> <id>"),
-- how it ended (done, failed, cancelled, deleted, unknown)
-- Returns a JSON string: [[ids whose own dependents are to be told (releasing)], jobs released, jobs
-- failed]
local waiting, deps, linked, releasing, release_outcomes = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local todos, seq, pending, enqueued, scheduled, priorities = KEYS[6], KEYS[7], KEYS[8], KEYS[9], KEYS[10], KEYS[11]
local wake, failed, errors, finished, history = KEYS[12], KEYS[13], KEYS[14], KEYS[15], KEYS[16]
local limits, grouped, group_lines, group_of, groups_ready = KEYS[17], KEYS[18], KEYS[19], KEYS[20], KEYS[21]
local groups_resting, groups_full, dependents, arrived, arrived_count = KEYS[22], KEYS[23], KEYS[24], KEYS[25], KEYS[26]
local wake_cap, ended = ARGV[1], ARGV[2]
local ARRIVALS = 3  -- ARGV[ARRIVALS..] the arrivals: id, generation, link, outcome
-- @include "now_ms"
-- @include "fields"
-- @include "links"

local W = {
  linked = linked, releasing = releasing, release_outcomes = release_outcomes,
  dependents = dependents, arrived = arrived, arrived_count = arrived_count,
  waiting = waiting, deps = deps, todos = todos, seq = seq, pending = pending, enqueued = enqueued,
  scheduled = scheduled, priorities = priorities, wake = wake, failed = failed,
  errors = errors, finished = finished, history = history,
  grouped = grouped, group_of = group_of,
}
local G = {
  limits = limits, grouped = grouped, lines = group_lines, group_of = group_of, ready = groups_ready,
  resting = groups_resting, full = groups_full,
}
local T = {wake_cap = wake_cap, ended = ended, failed_ids = {}, releases = {}, woken = 0}
-- No job waits here: nothing can arrive (each would be ignored).
if redis.call('EXISTS', waiting) == 0 then return cjson.encode({{}, 0, 0}) end
local now = now_ms()
local fields = read_fields(ARRIVALS, 4)
local arrivals = {}
for j = 1, #fields[1] do arrivals[j] = {fields[1][j], fields[2][j], fields[3][j], fields[4][j]} end
arrive_all(W, G, T, arrivals, now)
publish_failed(W, T)
return cjson.encode({T.releases, T.woken, #T.failed_ids})
