-- Structured output (docs/guides/agent-runs.md#structured-output): a run's final answer parsed and
-- validated against the schema its request gave (kept in the run's profile), and, while answers fail
-- validation, the attempts so far and what failed (the next turn tells the model).

alter table runs add column output jsonb;
alter table runs add column output_repair jsonb;
