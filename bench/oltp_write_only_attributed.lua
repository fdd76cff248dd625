-- sysbench's oltp_write_only, unchanged, printing what the benchmark needs to attribute the application's errors
-- (bench/load.py): the server's id of each session as it connects (a deadlock report names transactions by it),
-- and the code of every error sysbench ignores and retries (its err/s does not tell a deadlock from a lock-wait
-- timeout). Lines are flushed as written, so the reader times them.
require("oltp_write_only")

local LOST = {[2013] = true, [2055] = true, [2006] = true, [2011] = true}   -- the codes after which it reconnects

local function say(line)
   io.stdout:write(line, "\n")
   io.stdout:flush()
end

local function announce_session()
   say("bench-load: session " .. con:query_row("SELECT CONNECTION_ID()"))
end

local init = thread_init
function thread_init()
   init()
   announce_session()
end

local restart = sysbench.hooks.before_restart_event
function sysbench.hooks.before_restart_event(errdesc)
   say("bench-load: ignored error " .. tostring(errdesc.sql_errno))
   restart(errdesc)
   if LOST[errdesc.sql_errno] then
      announce_session()
   end
end
