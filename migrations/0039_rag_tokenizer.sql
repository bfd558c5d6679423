-- The tokenizer revision stored knowledge chunks and memories were indexed with (`tokenizerVersion`
-- in src/rag/text.ts). A server finding an older one tokenizes the affected texts again at start, in
-- the background, then records the new revision (docs/guides/knowledge-and-search.md).
alter table rag_settings add column tokenizer integer not null default 1;
