-- Sessions of MCP clients on /mcp (docs/mcp.md, "Sessions and elicitation"): kept here, not in one
-- process, so any instance behind a balancer serves any request of a session. What the client said
-- at `initialize` decides whether a call that needs a person is asked through MCP elicitation.
create table mcp_sessions (
  id                  text primary key,
  user_id             text not null references users(id) on delete cascade,
  protocol_version    text not null,
  client_capabilities jsonb not null,
  client_info         jsonb,
  created_at          timestamptz not null default now(),
  last_seen_at        timestamptz not null default now()
);
create index mcp_sessions_seen on mcp_sessions (last_seen_at);

-- A decision put to an MCP client as an elicitation: the session asked and, once the client answered,
-- its action (`accept`, `decline`, `cancel`), so the instance holding the call learns it.
create table mcp_elicitations (
  decision_id  text primary key references decisions(id) on delete cascade,
  session_id   text not null references mcp_sessions(id) on delete cascade,
  action       text check (action in ('accept', 'decline', 'cancel')),
  created_at   timestamptz not null default now(),
  answered_at  timestamptz
);
