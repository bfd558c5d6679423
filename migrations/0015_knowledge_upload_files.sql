-- On the embedded database an uploaded file waits for ingestion in a file of its own (under the data
-- directory's uploads/), not in the database: PGlite's memory grows with every large value it holds
-- and never shrinks. A Postgres server keeps using `upload` (any instance can ingest it).
alter table knowledge_items add column upload_path text;
