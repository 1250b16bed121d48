-- Presence audit: one row per status or privacy change a person made (a
-- manual status, invisible, who may see the user; by the user from a
-- session, or by an administrator with the API key). Automatic statuses
-- (online, idle, offline) are never recorded. Rows older than
-- presence.audit_retention are deleted by the gateways.
CREATE TABLE presence_audit (
	id         bigserial   PRIMARY KEY,
	user_id    text        NOT NULL,
	actor      text        NOT NULL,
	kind       text        NOT NULL,
	old_value  text        NOT NULL,
	new_value  text        NOT NULL,
	device     text        NOT NULL DEFAULT '',
	request_id text        NOT NULL DEFAULT '',
	at         timestamptz NOT NULL,
	CONSTRAINT presence_audit_kind CHECK (kind IN ('status', 'invisible', 'visibility'))
);
CREATE INDEX presence_audit_user ON presence_audit (user_id, id DESC);
CREATE INDEX presence_audit_at ON presence_audit (at);
