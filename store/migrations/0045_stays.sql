-- Stays: hotels, their room types and the per-night inventory that the
-- database itself keeps from being overbooked; reservations generalised
-- from seats to stays, so expiry, cancel, idempotency, the outbox and
-- payment stay one path for both.

CREATE TABLE hotels (
	id           text PRIMARY KEY CHECK (id ~ '^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$'),
	-- Registration order: the viewers' in-process registry of hotels reads
	-- only what is new since its last look.
	seq          bigint GENERATED ALWAYS AS IDENTITY UNIQUE,
	name         text NOT NULL CHECK (length(name) BETWEEN 1 AND 200),
	city         text NOT NULL CHECK (city ~ '^[a-z0-9][a-z0-9-]{0,63}$'),
	timezone     text NOT NULL CHECK (length(timezone) BETWEEN 1 AND 64),
	currency     char(3) NOT NULL CHECK (currency ~ '^[A-Z]{3}$'),
	hold_minutes integer NOT NULL DEFAULT 10 CHECK (hold_minutes BETWEEN 1 AND 60),
	-- A flash deal: holds need a waiting-room pass of the room named like
	-- the hotel.
	waiting_room boolean NOT NULL DEFAULT false,
	created_at   timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX hotels_by_city ON hotels (city);

CREATE TABLE room_types (
	hotel_id   text NOT NULL REFERENCES hotels (id) ON DELETE CASCADE,
	id         text NOT NULL CHECK (id ~ '^[A-Za-z0-9][A-Za-z0-9_-]{0,31}$'),
	name       text NOT NULL CHECK (length(name) BETWEEN 1 AND 100),
	position   integer NOT NULL,
	-- Guests one room sleeps.
	capacity   integer NOT NULL CHECK (capacity BETWEEN 1 AND 20),
	base_price bigint NOT NULL CHECK (base_price >= 0),
	rooms      integer NOT NULL CHECK (rooms BETWEEN 1 AND 10000),
	PRIMARY KEY (hotel_id, id),
	UNIQUE (hotel_id, position)
);

-- The inventory: one row per (hotel, room type, night). A hold adds to
-- held, a payment moves held to sold, an expiry or cancel takes from held.
-- Every transaction locks these rows in (hotel, room type, night) order,
-- so overlapping stays wait for each other instead of deadlocking.
CREATE TABLE room_nights (
	hotel_id     text NOT NULL,
	room_type_id text NOT NULL,
	night        date NOT NULL,
	total        integer NOT NULL CHECK (total >= 0),
	held         integer NOT NULL DEFAULT 0 CHECK (held >= 0),
	sold         integer NOT NULL DEFAULT 0 CHECK (sold >= 0),
	-- The calendar: this night's price per room when it differs from the
	-- room type's base price.
	price        bigint CHECK (price >= 0),
	PRIMARY KEY (hotel_id, room_type_id, night),
	FOREIGN KEY (hotel_id, room_type_id) REFERENCES room_types (hotel_id, id) ON DELETE CASCADE,
	-- The invariant: never more rooms promised than exist, whatever the
	-- code does.
	CONSTRAINT room_nights_no_overbooking CHECK (held + sold <= total)
);

-- A reservation holds seats of an event or a stay at a hotel.
ALTER TABLE reservations
	ADD COLUMN kind text NOT NULL DEFAULT 'seats' CHECK (kind IN ('seats', 'stay')),
	ADD COLUMN hotel_id text REFERENCES hotels (id),
	ALTER COLUMN event_id DROP NOT NULL,
	ADD CONSTRAINT reservations_subject CHECK (
		(kind = 'seats' AND event_id IS NOT NULL AND hotel_id IS NULL)
		OR (kind = 'stay' AND hotel_id IS NOT NULL AND event_id IS NULL));

-- One pending stay checkout per user per hotel, as one per event for seats.
CREATE UNIQUE INDEX one_active_stay_checkout ON reservations (user_id, hotel_id)
	WHERE status = 'PENDING_PAYMENT' AND kind = 'stay';

-- What a stay reservation holds: rooms of one type for check_in up to (not
-- including) check_out.
CREATE TABLE stays (
	reservation_id uuid PRIMARY KEY REFERENCES reservations (id),
	hotel_id       text NOT NULL,
	room_type_id   text NOT NULL,
	check_in       date NOT NULL,
	check_out      date NOT NULL,
	rooms          integer NOT NULL CHECK (rooms BETWEEN 1 AND 100),
	guests         integer NOT NULL CHECK (guests >= 1),
	FOREIGN KEY (hotel_id, room_type_id) REFERENCES room_types (hotel_id, id),
	CHECK (check_out > check_in AND check_out - check_in <= 30),
	-- The target of stay_nights' foreign key: every night agrees with its
	-- stay's hotel, room type and room count.
	UNIQUE (reservation_id, hotel_id, room_type_id, rooms)
);

-- One row per night of a stay, with its price per room frozen at hold
-- time. Nights have no state of their own: the reservation's status is the
-- stay's, so a stay is held, sold or released as a whole and can never be
-- partly expired.
CREATE TABLE stay_nights (
	reservation_id uuid NOT NULL,
	night          date NOT NULL,
	hotel_id       text NOT NULL,
	room_type_id   text NOT NULL,
	rooms          integer NOT NULL,
	base_price     bigint NOT NULL CHECK (base_price >= 0),
	price_at_lock  bigint NOT NULL CHECK (price_at_lock >= 0),
	PRIMARY KEY (reservation_id, night),
	FOREIGN KEY (reservation_id, hotel_id, room_type_id, rooms)
		REFERENCES stays (reservation_id, hotel_id, room_type_id, rooms),
	FOREIGN KEY (hotel_id, room_type_id, night) REFERENCES room_nights (hotel_id, room_type_id, night)
);
CREATE INDEX stay_nights_by_night ON stay_nights (hotel_id, room_type_id, night);
