-- Payments: only a verified webhook moves money. The constraints below hold
-- the money path's invariants whatever the application does.

CREATE TABLE payments (
	-- Our stable id: the provider's idempotency key for the intent, so a
	-- retry or the recovery worker gets the same intent back.
	id              uuid PRIMARY KEY,
	reservation_id  uuid NOT NULL REFERENCES reservations (id),
	user_id         text NOT NULL,
	idempotency_key text NOT NULL CHECK (length(idempotency_key) BETWEEN 1 AND 255),
	provider        text NOT NULL CHECK (provider ~ '^[a-z][a-z0-9_-]{0,31}$'),
	provider_ref    text,
	client_secret   text,
	amount          bigint NOT NULL CHECK (amount >= 0),
	currency        char(3) NOT NULL CHECK (currency ~ '^[A-Z]{3}$'),
	status          text NOT NULL CHECK (status IN
		('INITIALIZING', 'PENDING', 'SUCCEEDED', 'FAILED', 'REFUND_REQUIRED', 'REFUNDED')),
	-- The pre-charge fraud verdict; review is charged and flagged.
	fraud_verdict   text NOT NULL CHECK (fraud_verdict IN ('accept', 'review', 'unchecked')),
	-- The answer given to the client once the intent exists.
	response        jsonb,
	-- Background work (recovery, refunds) claims a row by moving this on.
	next_attempt_at timestamptz NOT NULL DEFAULT clock_timestamp(),
	attempts        integer NOT NULL DEFAULT 0,
	last_error      text,
	-- Refunds that failed refund_manual_after times wait for a person.
	manual          boolean NOT NULL DEFAULT false,
	refund_ref      text,
	created_at      timestamptz NOT NULL DEFAULT clock_timestamp(),
	updated_at      timestamptz NOT NULL DEFAULT clock_timestamp(),
	-- When the provider reported the money taken.
	charged_at      timestamptz,
	UNIQUE (user_id, idempotency_key),
	UNIQUE (provider, provider_ref),
	-- Past INITIALIZING an intent exists and we know it.
	CONSTRAINT payments_ref_known CHECK (status IN ('INITIALIZING', 'FAILED') OR provider_ref IS NOT NULL),
	-- Money was taken exactly in the states that hold or return it.
	CONSTRAINT payments_charged CHECK ((status IN ('SUCCEEDED', 'REFUND_REQUIRED', 'REFUNDED')) = (charged_at IS NOT NULL))
);

-- One live payment per reservation: two intents for one checkout would be
-- two charges for one set of seats.
CREATE UNIQUE INDEX one_live_payment_per_reservation ON payments (reservation_id)
	WHERE status IN ('INITIALIZING', 'PENDING', 'SUCCEEDED');
-- The queues of the recovery and refund workers.
CREATE INDEX payments_initializing ON payments (next_attempt_at) WHERE status = 'INITIALIZING';
CREATE INDEX payments_refund_required ON payments (next_attempt_at) WHERE status = 'REFUND_REQUIRED';

-- Every verified webhook event, deduplicated by (provider, event id) with a
-- fingerprint of its content; kept at least 30 days because providers
-- redeliver for that long.
CREATE TABLE payment_webhook_events (
	provider    text NOT NULL,
	event_id    text NOT NULL CHECK (length(event_id) BETWEEN 1 AND 255),
	fingerprint bytea NOT NULL,
	kind        text NOT NULL,
	payment_id  uuid,
	outcome     text NOT NULL,
	received_at timestamptz NOT NULL DEFAULT clock_timestamp(),
	PRIMARY KEY (provider, event_id)
);
CREATE INDEX payment_webhook_events_received ON payment_webhook_events (received_at);

-- Charges the provider reported for no payment of ours: refunded after a
-- grace period unless a payment claims them (the backstop of seed 003).
CREATE TABLE payment_orphan_charges (
	provider        text NOT NULL,
	provider_ref    text NOT NULL,
	amount          bigint NOT NULL,
	currency        text NOT NULL,
	status          text NOT NULL DEFAULT 'SEEN' CHECK (status IN ('SEEN', 'REFUNDED', 'CLAIMED')),
	attempts        integer NOT NULL DEFAULT 0,
	last_error      text,
	manual          boolean NOT NULL DEFAULT false,
	first_seen      timestamptz NOT NULL DEFAULT clock_timestamp(),
	next_attempt_at timestamptz NOT NULL DEFAULT clock_timestamp(),
	PRIMARY KEY (provider, provider_ref)
);

-- Outbox events a consumer has applied: its dedupe record, committed with
-- the effect.
CREATE TABLE payment_inbox (
	consumer     text NOT NULL,
	event_id     bigint NOT NULL,
	processed_at timestamptz NOT NULL DEFAULT clock_timestamp(),
	PRIMARY KEY (consumer, event_id)
);
CREATE INDEX payment_inbox_processed ON payment_inbox (processed_at);

CREATE TABLE tickets (
	id             uuid PRIMARY KEY,
	reservation_id uuid NOT NULL REFERENCES reservations (id),
	-- The checkout line (a reservation item) the ticket admits to.
	line_id        text NOT NULL CHECK (length(line_id) BETWEEN 1 AND 128),
	payment_id     uuid NOT NULL REFERENCES payments (id),
	event_id       text NOT NULL,
	user_id        text NOT NULL,
	label          text NOT NULL,
	-- The per-ticket QR secret, AES-GCM sealed (nonce || ciphertext) under
	-- the key named by key_id.
	secret_sealed  bytea NOT NULL,
	key_id         text NOT NULL,
	created_at     timestamptz NOT NULL DEFAULT clock_timestamp(),
	-- One ticket per seat, however often fulfillment runs.
	CONSTRAINT one_ticket_per_line UNIQUE (line_id)
);
CREATE INDEX tickets_by_user ON tickets (user_id, created_at);
CREATE INDEX tickets_by_event ON tickets (event_id);
CREATE INDEX tickets_by_reservation ON tickets (reservation_id);

-- One notification per paid order, sent with retries; a lost email is a
-- retry, and tickets never wait for it.
CREATE TABLE payment_notifications (
	reservation_id  uuid PRIMARY KEY REFERENCES reservations (id),
	user_id         text NOT NULL,
	event_id        text NOT NULL,
	tickets         integer NOT NULL,
	status          text NOT NULL DEFAULT 'PENDING' CHECK (status IN ('PENDING', 'SENT', 'DEAD')),
	attempts        integer NOT NULL DEFAULT 0,
	last_error      text,
	next_attempt_at timestamptz NOT NULL DEFAULT clock_timestamp(),
	created_at      timestamptz NOT NULL DEFAULT clock_timestamp(),
	sent_at         timestamptz
);
CREATE INDEX payment_notifications_due ON payment_notifications (next_attempt_at) WHERE status = 'PENDING';

-- The sandbox PSP's own ledger (development and tests): what it was asked,
-- what it charged and refunded, and the webhooks it still has to deliver.
CREATE TABLE sandbox_intents (
	id              text PRIMARY KEY,
	idempotency_key text NOT NULL UNIQUE,
	client_secret   text NOT NULL,
	amount          bigint NOT NULL,
	currency        text NOT NULL,
	metadata        jsonb NOT NULL,
	status          text NOT NULL CHECK (status IN ('requires_confirmation', 'succeeded', 'canceled')),
	faults          text[] NOT NULL DEFAULT '{}',
	created_at      timestamptz NOT NULL DEFAULT clock_timestamp(),
	charged_at      timestamptz
);
CREATE TABLE sandbox_refunds (
	id              text PRIMARY KEY,
	idempotency_key text NOT NULL UNIQUE,
	intent_id       text NOT NULL REFERENCES sandbox_intents (id),
	amount          bigint NOT NULL,
	created_at      timestamptz NOT NULL DEFAULT clock_timestamp()
);
-- A refund never exceeds its charge: one refund per intent.
CREATE UNIQUE INDEX sandbox_one_refund_per_intent ON sandbox_refunds (intent_id);
CREATE TABLE sandbox_deliveries (
	id           bigserial PRIMARY KEY,
	event_id     text NOT NULL,
	-- The endpoint, fixed when the event is queued, as a provider does.
	url          text NOT NULL,
	payload      bytea NOT NULL,
	attempts     integer NOT NULL DEFAULT 0,
	next_at      timestamptz NOT NULL DEFAULT clock_timestamp(),
	delivered_at timestamptz,
	last_status  integer
);
CREATE INDEX sandbox_deliveries_due ON sandbox_deliveries (next_at) WHERE delivered_at IS NULL;
