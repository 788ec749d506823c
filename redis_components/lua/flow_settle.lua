-- KEYS: 1) the workflow's HASH  2) its home's enqueue counter  3) the ZSET of live
--       workflows  4) the ZSET of finished ones  5) the workflows' outbox of released
--       steps (see lib/flow.lua)
-- ARGV: 1) the step's number  2) its final state: S, F or C  3) its record: its return
--       value (JSON), or its failure record  4) how long to keep a finished workflow, in
--       ms
-- Returns: the steps this released, flat: task id, then its outbox entry ("<queue>\n
--          <rank>\n<payload>"), each to be enqueued in its queue's home
--          (flow_release.lua); empty when the step was settled already, or its workflow
--          is gone (expired): then nothing changed
-- Settles the final outcome of a step that ran in another home than its workflow's,
-- which the script that recorded it wrote to that home's outbox: as the same script
-- does in the workflow's home (lib/flow.lua's flow_settle), but the steps it releases
-- go to the workflows' outbox. Idempotent: a step counts once.
-- @include flow
local flow = flow_open(1)
flow.released, flow.out = KEYS[5], {}
flow_settle(flow, tonumber(ARGV[1]), ARGV[2], ARGV[3], queue_now(), tonumber(ARGV[4]))
return flow.out
