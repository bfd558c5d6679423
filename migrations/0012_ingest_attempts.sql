-- How many times an item's ingestion was started: a claim counts one, so an item whose ingestion keeps
-- being interrupted (a parser that takes the server down, a crash) is failed after a few, never
-- claimed for ever. Claims also fence each batch of chunks by this number.
alter table knowledge_items add column ingest_attempts integer not null default 0;
