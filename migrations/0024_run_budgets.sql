-- A run's budget (docs/guides/operating.md#budgets): the most model calls, tokens and cost it may spend,
-- checked before each model call. Null: none.

alter table runs add column budget jsonb;
