-- The transactional outbox: a domain change and the events it implies commit
-- in one transaction; the relay publishes them afterwards (at least once).
CREATE TABLE outbox (
	id           bigserial PRIMARY KEY,
	kind         text NOT NULL CHECK (kind <> ''),
	aggregate_id text NOT NULL,
	payload      jsonb NOT NULL,
	created_at   timestamptz NOT NULL DEFAULT clock_timestamp(),
	published_at timestamptz
);

-- The relay's work queue: only unpublished rows, in id order.
CREATE INDEX outbox_unpublished ON outbox (id) WHERE published_at IS NULL;
CREATE INDEX outbox_published_at ON outbox (published_at) WHERE published_at IS NOT NULL;
