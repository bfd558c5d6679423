-- Whether a run's automatic knowledge injection also uses what members other than the project's owner
-- published. Off by default: a member's published text would otherwise reach the owner's prompt
-- unasked (the knowledge_search tool still finds it).
alter table projects add column inject_member_knowledge boolean not null default false;
