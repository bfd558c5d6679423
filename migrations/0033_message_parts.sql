-- Multimodal input (docs/guides/agent-runs.md#images-in-messages): a user message's parts beyond its
-- text — `[{"type": "text", "text"}, {"type": "image", "path", "mediaType", "width", "height"}]`, the
-- images kept as files of the conversation (its work directory). Null: text only (`content`).

alter table messages add column parts jsonb;
