-- Long-term memory (docs/guides/memory.md): facts kept across conversations, either a user's own
-- (`scope = 'user'`, seen only by them) or a project's (`scope = 'project'`, seen by whoever may search
-- the project). A fact is named by its namespace and key within its scope; remembering the same key
-- again replaces it. Search uses the same full-text vector and embedding as knowledge chunks.

create table memories (
  id          text primary key,
  scope       text not null check (scope in ('user', 'project')),
  -- the user who wrote it (for a user memory: whose it is)
  owner_id    text not null references users (id),
  project_id  text references projects (id),
  namespace   text not null,
  key         text not null,
  value       jsonb,
  text        text not null,
  search      tsvector not null,
  embedding   vector not null,
  created_at  timestamptz not null default now(),
  updated_at  timestamptz not null default now(),
  check ((scope = 'project') = (project_id is not null))
);
create unique index memories_user_key on memories (owner_id, namespace, key) where scope = 'user';
create unique index memories_project_key on memories (project_id, namespace, key) where scope = 'project';
create index memories_project_idx on memories (project_id, id) where scope = 'project';
create index memories_owner_idx on memories (owner_id, id) where scope = 'user';
create index memories_search_idx on memories using gin (search);

-- Whether runs in the project have the user's and the project's memories recalled into the prompt.
alter table projects add column memory_recall boolean not null default true;
