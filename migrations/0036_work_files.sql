-- Work directories shared by every instance (docs/guides/scaling.md#files): the files of a conversation's
-- work directory, stored in the database so that a run resumed or continued on another instance sees
-- what earlier rounds wrote. Each instance keeps a local copy (its cache) and syncs it by hash.
--
-- Content is stored once per distinct content (`work_blobs`, keyed by the SHA-256 of the bytes) in
-- chunks of at most 1 MiB; the manifest (`work_files`) names, per conversation and path, the blob it
-- holds. A blob no file names any more is deleted in the transaction that dropped its last name; the
-- foreign key makes a manifest write that raced with that deletion fail, and the writer stores it again.

create table work_blobs (
  hash        text primary key,
  size        bigint not null,
  -- when a sync last stored or reused it: content no file names is swept an hour after this
  wanted_at   timestamptz not null default now()
);

create table work_blob_chunks (
  hash  text not null references work_blobs (hash) on delete cascade,
  seq   integer not null,
  data  bytea not null,
  primary key (hash, seq)
);

create table work_files (
  conversation_id  text not null references conversations (id),
  path             text not null,
  hash             text not null references work_blobs (hash),
  size             bigint not null,
  modified_at      timestamptz not null default now(),
  primary key (conversation_id, path)
);
create index work_files_hash_idx on work_files (hash);

-- One row per conversation whose files changed: `version` grows with every change, so an instance
-- whose copy is current knows it from one lookup.
create table work_manifests (
  conversation_id  text primary key references conversations (id),
  version          bigint not null default 0
);
