-- Booking: events, their seats, reservations and the constraints that make
-- a double sale impossible whatever the application does.

CREATE TABLE events (
	id                 text PRIMARY KEY CHECK (id ~ '^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$'),
	name               text NOT NULL,
	currency           char(3) NOT NULL CHECK (currency ~ '^[A-Z]{3}$'),
	starts_at          timestamptz NOT NULL,
	sale_opens_at      timestamptz NOT NULL,
	sale_closes_at     timestamptz,
	hold_minutes       integer NOT NULL DEFAULT 10 CHECK (hold_minutes BETWEEN 1 AND 60),
	created_at         timestamptz NOT NULL DEFAULT now(),
	CHECK (sale_closes_at IS NULL OR sale_closes_at > sale_opens_at)
);

CREATE TABLE sections (
	event_id   text NOT NULL REFERENCES events (id) ON DELETE CASCADE,
	id         text NOT NULL CHECK (id ~ '^[A-Za-z0-9][A-Za-z0-9_-]{0,15}$'),
	name       text NOT NULL,
	position   integer NOT NULL,
	base_price bigint NOT NULL CHECK (base_price >= 0),
	seat_count integer NOT NULL CHECK (seat_count > 0),
	PRIMARY KEY (event_id, id),
	UNIQUE (event_id, position)
);

CREATE TABLE reservations (
	id         uuid PRIMARY KEY,
	event_id   text NOT NULL REFERENCES events (id),
	user_id    text NOT NULL,
	status     text NOT NULL CHECK (status IN ('PENDING_PAYMENT', 'PAID', 'EXPIRED', 'CANCELLED')),
	expires_at timestamptz NOT NULL,
	total      bigint NOT NULL CHECK (total >= 0),
	currency   char(3) NOT NULL,
	promo_code text,
	created_at timestamptz NOT NULL DEFAULT clock_timestamp(),
	updated_at timestamptz NOT NULL DEFAULT clock_timestamp()
);

-- One pending checkout per user per event: nobody hoards by opening many.
CREATE UNIQUE INDEX one_active_checkout ON reservations (user_id, event_id)
	WHERE status = 'PENDING_PAYMENT';
-- The expiry worker's queue.
CREATE INDEX reservations_pending_expiry ON reservations (expires_at)
	WHERE status = 'PENDING_PAYMENT';

CREATE TABLE seats (
	id             bigserial PRIMARY KEY,
	event_id       text NOT NULL,
	section_id     text NOT NULL,
	row_num        integer NOT NULL CHECK (row_num > 0),
	seat_num       integer NOT NULL CHECK (seat_num > 0),
	-- Fixed layout order within the event (section, row, number): the bit
	-- position of the seat in the seat-map bitmap.
	layout_order   integer NOT NULL CHECK (layout_order >= 0),
	status         text NOT NULL DEFAULT 'AVAILABLE' CHECK (status IN ('AVAILABLE', 'HELD', 'SOLD', 'BLOCKED')),
	reservation_id uuid REFERENCES reservations (id),
	base_price     bigint NOT NULL CHECK (base_price >= 0),
	version        integer NOT NULL DEFAULT 0,
	FOREIGN KEY (event_id, section_id) REFERENCES sections (event_id, id) ON DELETE CASCADE,
	UNIQUE (event_id, section_id, row_num, seat_num),
	UNIQUE (event_id, layout_order),
	-- A seat is HELD or SOLD by exactly one named reservation, and free seats
	-- name none.
	CONSTRAINT seats_owner_state CHECK (
		(status IN ('AVAILABLE', 'BLOCKED') AND reservation_id IS NULL)
		OR (status IN ('HELD', 'SOLD') AND reservation_id IS NOT NULL))
);
CREATE INDEX seats_by_reservation ON seats (reservation_id) WHERE reservation_id IS NOT NULL;

CREATE TABLE reservation_items (
	id             bigserial PRIMARY KEY,
	reservation_id uuid NOT NULL REFERENCES reservations (id),
	seat_id        bigint NOT NULL REFERENCES seats (id),
	section_id     text NOT NULL,
	-- The price as frozen at hold time: the only price that counts.
	base_price     bigint NOT NULL CHECK (base_price >= 0),
	surge_bps      integer NOT NULL CHECK (surge_bps BETWEEN 10000 AND 15000),
	discount       bigint NOT NULL CHECK (discount >= 0),
	price_at_lock  bigint NOT NULL CHECK (price_at_lock >= 0),
	status         text NOT NULL CHECK (status IN ('HELD', 'SOLD', 'CHECKED_IN', 'RELEASED')),
	UNIQUE (reservation_id, seat_id)
);

-- Invariant one: a seat has at most one live owner. Released items fall out
-- of the index, so the seat can be held again.
CREATE UNIQUE INDEX one_live_owner_per_seat ON reservation_items (seat_id)
	WHERE status IN ('HELD', 'SOLD', 'CHECKED_IN');

-- How many seats of each section are held or sold, for the scarcity
-- multiplier, kept in 16 rows per section so concurrent holds rarely wait on
-- each other: a hold adds to one random shard of each section it touches
-- (in section order), a release subtracts; the sum over shards is exact.
-- Counting seat rows instead would cost every hold a scan of the section.
CREATE TABLE section_occupancy (
	event_id   text NOT NULL,
	section_id text NOT NULL,
	shard      smallint NOT NULL CHECK (shard BETWEEN 0 AND 15),
	taken      integer NOT NULL DEFAULT 0,
	PRIMARY KEY (event_id, section_id, shard),
	FOREIGN KEY (event_id, section_id) REFERENCES sections (event_id, id) ON DELETE CASCADE
);

CREATE TABLE promotions (
	event_id     text NOT NULL REFERENCES events (id) ON DELETE CASCADE,
	code         text NOT NULL CHECK (code ~ '^[A-Za-z0-9_-]{1,32}$'),
	discount_bps integer NOT NULL CHECK (discount_bps BETWEEN 1 AND 10000),
	max_uses     integer NOT NULL CHECK (max_uses >= 0),
	used         integer NOT NULL DEFAULT 0,
	valid_until  timestamptz,
	PRIMARY KEY (event_id, code),
	-- The global cap is a locked row and this check.
	CHECK (used BETWEEN 0 AND max_uses)
);

-- The per-user cap is this key: one use per (code, user).
CREATE TABLE promotion_uses (
	event_id       text NOT NULL,
	code           text NOT NULL,
	user_id        text NOT NULL,
	reservation_id uuid NOT NULL REFERENCES reservations (id),
	PRIMARY KEY (event_id, code, user_id),
	FOREIGN KEY (event_id, code) REFERENCES promotions (event_id, code)
);

-- Stored responses of idempotent requests, written in the transaction of the
-- change they answer.
CREATE TABLE idempotency_keys (
	user_id     text NOT NULL,
	operation   text NOT NULL,
	key         text NOT NULL CHECK (length(key) BETWEEN 1 AND 255),
	fingerprint bytea NOT NULL,
	status_code integer NOT NULL,
	-- The exact bytes answered: a replay must be byte for byte the same.
	response    bytea NOT NULL,
	created_at  timestamptz NOT NULL DEFAULT clock_timestamp(),
	PRIMARY KEY (user_id, operation, key)
);
CREATE INDEX idempotency_keys_created ON idempotency_keys (created_at);
