-- Budgets per project and per user for a day and a month (docs/guides/operating.md#budgets): the most
-- tokens and cost their model calls may add up to in the current UTC period, checked before new runs and
-- before each model call. A project's also holds its runs' default run budget. Null: none.

alter table projects add column budget jsonb;
alter table users add column budget jsonb;
