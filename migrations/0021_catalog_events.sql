-- `commands.changed` events (docs/mcp.md, "The catalog's stream event") belong to no project: every
-- project and conversation stream delivers them, so replay finds them by this index.
create index events_catalog_idx on events (id) where type = 'commands.changed' and project_id is null;
