-- includes/limits.lua: rate limits as GCRA: tat (ms), the next start's theoretical arrival time. A
-- rate "<count> <period ms> <burst>" allows a start every interval = period / count ms, up to burst
-- at once: burst - (max(tat, now) - now) / interval now; taking n moves tat on n intervals. A past
-- tat is a full bucket, the same as none.
-- read_rate(spec) -> interval ms, burst; nil for none
local function read_rate(spec)
  if not spec or spec == '' then return nil end
  local count, period, burst = string.match(spec, '^(%d+) (%d+) (%d+)$')
  return tonumber(period) / tonumber(count), tonumber(burst)
end

-- allowance -> the starts allowed now, and the tat to move on from
local function allowance(tat, interval, burst, now)
  local from = math.max(tonumber(tat) or now, now)
  -- The slack absorbs the float rounding of interval, never a whole start.
  return math.max(0, math.floor(burst - (from - now) / interval + 1e-6)), from
end

-- ready_at -> when (ms) n starts are allowed
local function ready_at(from, interval, burst, n)
  return math.ceil(from - (burst - math.min(n, burst)) * interval)
end
