#!lua flags=allow-oom
-- claim.lua: take up to N jobs from the front of todos (the highest priority first and, within a
-- priority, the earliest place in line), move them to in_progress with their rank and lease them,
-- in one step. One lease covers the whole claim: its lock key, named after the claim's token, holds
-- the number of the claim's jobs still held and carries the TTL. Because the move and the lock
-- happen in one script, no cleaner can ever see a claimed id in in_progress without its lock.
--
-- KEYS[1] request      request record setqueue:{Q}:req:<token>  (a resent call returns the same leases)
-- KEYS[2] todos        KEYS[3] in_progress  (zsets: id -> rank, see includes/rank.lua)
-- KEYS[4] pending      (zset: id -> enqueue time in ms)
-- KEYS[5] attempts     (hash: id -> number of claims so far)
-- KEYS[6] payloads     (hash: id -> payload)
-- KEYS[7] owners       (hash: id -> lease token of its current claim)
-- KEYS[8] lock         setqueue:{Q}:lock:<token>  (string: jobs of this claim still held; TTL = lease)
-- KEYS[9] scheduled    (zset: id -> due time in ms; due ids are promoted into todos first)
-- KEYS[10] wake        (list idle workers block on: woken when more became due than this claim took)
-- KEYS[11] seq         (counter: the last place given in the line)
-- KEYS[12] priorities  (hash: id -> priority of a scheduled or failed job whose priority is not 0)
-- KEYS[13] options     (hash: id -> "<max attempts>|<timeout ms>" of a job enqueued with its own)
-- ARGV[1] record_ttl   request record TTL in ms
-- ARGV[2] token        lease token (random, fresh for every call)
-- ARGV[3] lease_ms     lease duration in ms
-- ARGV[4] most         most ids to claim
-- ARGV[5] promote      most due ids to move from scheduled into todos in this call
-- ARGV[6] wake_cap     wake list cap
-- Returns an array: now ms, the due time in ms of the next scheduled job when nothing was claimed
-- (-1: none, or something was claimed), then id, attempt, enqueue ms (-1 if unknown), priority,
-- payload (nil if none) and its own options (nil if none) for each claimed id, in line order. A
-- resend returns the ids of the first call that this claim still owns. The request record holds
-- the claimed ids, one a line (ids hold no line breaks).
local request, todos, in_progress, pending = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local attempts, payloads, owners, lock, scheduled, wake = KEYS[5], KEYS[6], KEYS[7], KEYS[8], KEYS[9], KEYS[10]
local seq, priorities, options = KEYS[11], KEYS[12], KEYS[13]
local record_ttl, token, lease_ms, most = ARGV[1], ARGV[2], ARGV[3], tonumber(ARGV[4])
local promote, wake_cap = tonumber(ARGV[5]), ARGV[6]
-- @include "request_record"
-- @include "now_ms"
-- @include "promote"
-- @include "wake"

local now = now_ms()

local ids, tries, ranks = {}, {}, {}
local listed = recorded(request)
if listed then
  -- A resend: keep the ids of the first call that this claim still owns.
  local first = {}
  for id in string.gmatch(listed, '[^\n]+') do first[#first + 1] = id end
  if #first > 0 then
    local owner = redis.call('HMGET', owners, unpack(first))
    for j = 1, #first do
      if owner[j] == token then ids[#ids + 1] = first[j] end
    end
  end
  if #ids > 0 then
    tries = redis.call('HMGET', attempts, unpack(ids))
    ranks = redis.call('ZMSCORE', in_progress, unpack(ids))
  end
else
  local promoted = promote_due(scheduled, todos, pending, priorities, seq, now, promote)
  local front = redis.call('ZPOPMIN', todos, most)
  for j = 1, #front, 2 do
    ids[#ids + 1] = front[j]
    ranks[#ranks + 1] = tonumber(front[j + 1])
  end
  if promoted > #ids then wake_workers(wake, promoted - #ids, wake_cap) end
  -- One command per key for the whole batch: a call from Lua costs more than its work on one id.
  if #ids > 0 then
    local ranked = {}
    for j = 1, #ids do ranked[2 * j - 1], ranked[2 * j] = ranks[j], ids[j] end
    redis.call('ZADD', in_progress, unpack(ranked))
    local before = redis.call('HMGET', attempts, unpack(ids))
    local counts, owned = {}, {}
    for j = 1, #ids do
      tries[j] = (tonumber(before[j]) or 0) + 1
      counts[2 * j - 1], counts[2 * j] = ids[j], tries[j]
      owned[2 * j - 1], owned[2 * j] = ids[j], token
    end
    redis.call('HSET', attempts, unpack(counts))
    redis.call('HSET', owners, unpack(owned))
    redis.call('SET', lock, #ids, 'PX', lease_ms)
  end
  record(request, table.concat(ids, '\n'), record_ttl)
end

local next_due = -1
if #ids == 0 then
  local first = redis.call('ZRANGE', scheduled, 0, 0, 'WITHSCORES')
  if #first == 2 then next_due = tonumber(first[2]) end
end
local reply = {now, next_due}
if #ids > 0 then
  local enqueued = redis.call('ZMSCORE', pending, unpack(ids))
  local payload = redis.call('HMGET', payloads, unpack(ids))
  local own = redis.call('HMGET', options, unpack(ids))
  for j = 1, #ids do
    reply[#reply + 1] = ids[j]
    reply[#reply + 1] = tonumber(tries[j])
    reply[#reply + 1] = tonumber(enqueued[j]) or -1
    reply[#reply + 1] = priority_of(ranks[j] or 0)
    reply[#reply + 1] = payload[j]
    reply[#reply + 1] = own[j]
  end
end
return reply
