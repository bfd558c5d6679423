-- Context compaction (docs/guides/agent-runs.md#context-compaction): a summary of a conversation's oldest
-- messages that later prompts send instead of them. The messages stay stored and readable; a compaction
-- names the range it stands for: after `after_message_id` (null: from the start) through
-- `through_message_id`. The newest compaction of a conversation is the one prompts use (it folds in the
-- previous one's summary).

create table compactions (
  id                  text primary key,
  conversation_id     text not null references conversations (id),
  after_message_id    text,
  through_message_id  text not null,
  message_count       integer not null,
  summary             text not null,
  model               text not null,
  -- the run whose start made it (null: forced over HTTP)
  run_id              text,
  created_at          timestamptz not null default now()
);
create index compactions_conversation_idx on compactions (conversation_id, id);
