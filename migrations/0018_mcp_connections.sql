-- A user's own connection to an MCP server that requires OAuth (docs/mcp.md, "Per-user connections"):
-- the OAuth client registration, the pending flow (state, PKCE verifier, redirect) and the tokens,
-- sealed with PLINTH_SECRET_KEY (AES-256-GCM) so the database alone never holds a usable token.
create table mcp_connections (
  user_id     text not null references users(id) on delete cascade,
  server      text not null,
  -- The pending authorization's `state` (random); null once the callback has been answered.
  state       text,
  connected   boolean not null default false,
  sealed      text not null,
  created_at  timestamptz not null default now(),
  updated_at  timestamptz not null default now(),
  primary key (user_id, server)
);
create unique index mcp_connections_state on mcp_connections (state) where state is not null;
