-- adopt.lua: adopt a queue written before 0.3 (todos and in_progress plain sets; see
-- includes/layout.lua) and change nothing else. The scripts that write todos or in_progress do this
-- themselves; readers call it when a read meets a set where a zset should be (WRONGTYPE).
--
-- KEYS[1] todos   KEYS[2] in_progress   KEYS[3] legacy_todos
-- No ARGV.
-- Returns 1.
local todos, in_progress, legacy_todos = KEYS[1], KEYS[2], KEYS[3]
-- @include "layout"

adopt_old_layout(todos, in_progress, legacy_todos)
return 1
