-- What a decision asks of a person: to approve a call, or first to connect their own account to the
-- MCP server the call goes to (docs/mcp.md, "Per-user connections"); connecting approves it.
alter table decisions add column kind text not null default 'approve' check (kind in ('approve', 'connect'));
