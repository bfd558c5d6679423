-- Answering a decision with edits (docs/guides/commands-and-decisions.md#edit-or-respond): what the
-- person answered besides approve or reject — `{"kind": "edit", "params": …}` (approved with changed
-- params) or `{"kind": "respond", "text": …}` (not run; the text goes to the model as the call's result).

alter table decisions add column reply jsonb;
