-- Project knowledge: items (text or uploaded files), their chunks with a full-text vector and an
-- embedding, and the embedder the embeddings were made with.

create table knowledge_items (
  id                 text primary key,
  project_id         text not null references projects (id),
  owner_id           text not null references users (id),
  title              text not null,
  status             text not null default 'draft' check (status in ('draft', 'published')),
  ingest_status      text not null default 'pending' check (ingest_status in ('pending', 'ready', 'failed')),
  ingest_error       text,
  source             text not null check (source in ('text', 'file', 'command')),
  filename           text,
  media_type         text,
  byte_size          integer not null default 0,
  -- the item's text: as given, or extracted from the file once ingested
  body               text,
  -- an uploaded file until it is ingested, so a crash or restart loses nothing
  upload             bytea,
  chunk_count        integer not null default 0,
  ingest_lease_until timestamptz,
  created_at         timestamptz not null default now(),
  updated_at         timestamptz not null default now(),
  published_at       timestamptz,
  deleted_at         timestamptz
);
create index knowledge_items_project_idx on knowledge_items (project_id, id) where deleted_at is null;
create index knowledge_items_pending_idx on knowledge_items (id) where ingest_status = 'pending' and deleted_at is null;

-- Chunks carry their item's project, owner and publication, so a search filters without a join.
-- The embedding column has no fixed dimension: the HNSW index is built on a cast to the dimension
-- recorded in rag_settings (created at start), so a deployment chooses its embedder.
create table knowledge_chunks (
  id         text primary key,
  item_id    text not null references knowledge_items (id),
  project_id text not null,
  owner_id   text not null,
  published  boolean not null default false,
  seq        integer not null,
  heading    text not null default '',
  text       text not null,
  search     tsvector not null,
  embedding  vector not null
);
create index knowledge_chunks_item_idx on knowledge_chunks (item_id, seq);
create index knowledge_chunks_scope_idx on knowledge_chunks (project_id, owner_id);
create index knowledge_chunks_search_idx on knowledge_chunks using gin (search);

create table rag_settings (
  id         integer primary key check (id = 1),
  -- what made the embeddings: provider, model and dimension (e.g. hash-v1:256)
  embedder   text not null,
  dimensions integer not null,
  updated_at timestamptz not null default now()
);

-- What a run put in front of the model from project knowledge (null until computed; {"autoInject":false} when off).
alter table runs add column knowledge jsonb;
