-- viewers: hot-hotel shard tiers and the abuse denylist.

-- One row per hotel that is, or was, hot; a hotel without a row has one
-- shard. Readers always cover writers (write_tier <= read_tier): a
-- promotion raises read_tier first and write_tier after a delay, a demotion
-- lowers write_tier first and read_tier after a delay. next_step_at is set
-- exactly while the two differ.
CREATE TABLE viewers_hotel_tiers (
	hotel_id     text PRIMARY KEY CHECK (hotel_id ~ '^[A-Za-z0-9_.-]{1,64}$'),
	read_tier    smallint NOT NULL CHECK (read_tier IN (1, 16, 64)),
	write_tier   smallint NOT NULL CHECK (write_tier IN (1, 16, 64)),
	target_tier  smallint NOT NULL CHECK (target_tier IN (1, 16, 64)),
	next_step_at timestamptz,
	quiet_since  timestamptz,
	last_rate    double precision NOT NULL DEFAULT 0 CHECK (last_rate >= 0),
	changed_at   timestamptz NOT NULL DEFAULT now(),
	CHECK (write_tier <= read_tier),
	CHECK (target_tier = read_tier OR target_tier = write_tier),
	CHECK ((read_tier = write_tier) = (next_step_at IS NULL))
);

CREATE INDEX viewers_hotel_tiers_hot ON viewers_hotel_tiers (hotel_id) WHERE read_tier > 1 OR write_tier > 1;

-- Sessions (subject 's:<16 hex>') and IP prefixes ('p:<prefix>') whose
-- heartbeats are answered but not counted until expires_at.
CREATE TABLE viewers_denylist (
	subject    text PRIMARY KEY CHECK (subject ~ '^(s:[0-9a-f]{16}|p:[0-9a-f.:]+/[0-9]{1,3})$'),
	rule       text NOT NULL CHECK (rule <> ''),
	reason     text NOT NULL CHECK (reason <> ''),
	hits       integer NOT NULL DEFAULT 1 CHECK (hits > 0),
	expires_at timestamptz NOT NULL,
	created_at timestamptz NOT NULL DEFAULT now(),
	updated_at timestamptz NOT NULL DEFAULT now(),
	CHECK (expires_at > created_at)
);

CREATE INDEX viewers_denylist_updated ON viewers_denylist (updated_at);
CREATE INDEX viewers_denylist_expires ON viewers_denylist (expires_at);
