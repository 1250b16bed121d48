package config

import "time"

// Booking configures holds, expiry and the seat map.
type Booking struct {
	// Holds a user may attempt per minute (429 beyond).
	HoldsPerMinute int `yaml:"holds_per_minute"`
	// Seats one hold may take.
	MaxSeatsPerHold int `yaml:"max_seats_per_hold"`
	// Bounds on every hold transaction: a blocked lock or a slow statement
	// fails fast as a retryable 503 instead of piling up.
	LockTimeout      time.Duration `yaml:"lock_timeout"`
	StatementTimeout time.Duration `yaml:"statement_timeout"`
	// HoldWriters is how many hold writes one process runs at a time.
	// Holds that reach their write while all are busy are written
	// together, in one statement and one commit: fewer writers batch more.
	// One suits a process whose holds are CPU-bound (two cores shared
	// with PostgreSQL and Redis); raise it where holds wait on the
	// commit's flush with cores idle, or where a hold's seat lock is
	// often contended, as a lock wait holds up the writes queued behind it.
	// Best-available holds have as many slots of their own.
	HoldWriters int `yaml:"hold_writers"`
	// HoldReaders is how many hold reads (the first round trip) one
	// process runs at a time; reads arriving while all are busy go
	// together in one round trip.
	HoldReaders int `yaml:"hold_readers"`
	// The expiry worker's period and batch.
	ExpiryInterval time.Duration `yaml:"expiry_interval"`
	ExpiryBatch    int           `yaml:"expiry_batch"`
	// HintClaimTTL is how long a seat hint a hold takes lives (a commit
	// does not extend it: that would be a second Redis call; a seat
	// PostgreSQL refuses as held is hinted again for the rest of its
	// hold): a process that dies between the hint and the commit blocks
	// the seats this long, not the hold time.
	HintClaimTTL time.Duration `yaml:"hint_claim_ttl"`
	// Stored idempotent responses are kept this long.
	IdempotencyTTL time.Duration `yaml:"idempotency_ttl"`
	// Seat-map snapshots live this long in Redis.
	SeatMapTTL time.Duration `yaml:"seat_map_ttl"`
	// A reader that finds another filling the snapshot waits this long for it.
	SeatMapFillWait time.Duration `yaml:"seat_map_fill_wait"`
	// Messages queued per live seat-map viewer before it is dropped.
	LiveQueue int `yaml:"live_queue"`

	// Stays. Rooms one stay hold may take, and its longest stay in nights.
	MaxRoomsPerHold  int `yaml:"max_rooms_per_hold"`
	MaxNightsPerStay int `yaml:"max_nights_per_stay"`
	// The booking plane keeps each hotel's settings this long, so refusals
	// (unknown hotel, no pass for a flash deal) cost no database round trip.
	HotelCacheTTL time.Duration `yaml:"hotel_cache_ttl"`
	// A city's cached search answers live at most this long in Redis; the
	// outbox relay drops them as soon as an inventory change commits.
	SearchCacheTTL time.Duration `yaml:"search_cache_ttl"`
	// Cache-Control max-age of search answers.
	SearchMaxAge time.Duration `yaml:"search_max_age"`
}

func defaultBooking() Booking {
	return Booking{
		HoldsPerMinute:   30,
		MaxSeatsPerHold:  6,
		LockTimeout:      2 * time.Second,
		StatementTimeout: 5 * time.Second,
		HoldWriters:      1,
		HoldReaders:      1,
		ExpiryInterval:   time.Second,
		ExpiryBatch:      100,
		HintClaimTTL:     15 * time.Second,
		IdempotencyTTL:   24 * time.Hour,
		SeatMapTTL:       2 * time.Second,
		SeatMapFillWait:  500 * time.Millisecond,
		LiveQueue:        8,
		MaxRoomsPerHold:  8,
		MaxNightsPerStay: 30,
		HotelCacheTTL:    5 * time.Second,
		SearchCacheTTL:   time.Minute,
		SearchMaxAge:     5 * time.Second,
	}
}

func (b Booking) validate(bad badFunc) {
	if b.HoldsPerMinute <= 0 {
		bad("booking.holds_per_minute", "must be positive")
	}
	if b.HoldWriters < 1 || b.HoldWriters > 64 {
		bad("booking.hold_writers", "must be between 1 and 64")
	}
	if b.HoldReaders < 1 || b.HoldReaders > 64 {
		bad("booking.hold_readers", "must be between 1 and 64")
	}
	if b.MaxSeatsPerHold < 1 || b.MaxSeatsPerHold > 50 {
		bad("booking.max_seats_per_hold", "must be between 1 and 50")
	}
	for key, d := range map[string]time.Duration{
		"booking.lock_timeout": b.LockTimeout, "booking.statement_timeout": b.StatementTimeout,
		"booking.expiry_interval": b.ExpiryInterval, "booking.idempotency_ttl": b.IdempotencyTTL,
		"booking.seat_map_ttl": b.SeatMapTTL, "booking.seat_map_fill_wait": b.SeatMapFillWait,
		"booking.hotel_cache_ttl": b.HotelCacheTTL, "booking.search_cache_ttl": b.SearchCacheTTL,
		"booking.search_max_age": b.SearchMaxAge,
		"booking.hint_claim_ttl": b.HintClaimTTL,
	} {
		if d <= 0 {
			bad(key, "must be a positive duration")
		}
	}
	if b.HintClaimTTL < b.StatementTimeout {
		bad("booking.hint_claim_ttl", "must be at least booking.statement_timeout, so a slow hold keeps its hints")
	}
	if b.ExpiryBatch <= 0 {
		bad("booking.expiry_batch", "must be positive")
	}
	if b.LiveQueue <= 0 {
		bad("booking.live_queue", "must be positive")
	}
	if b.MaxRoomsPerHold < 1 || b.MaxRoomsPerHold > 100 {
		bad("booking.max_rooms_per_hold", "must be between 1 and 100")
	}
	if b.MaxNightsPerStay < 1 || b.MaxNightsPerStay > 30 {
		bad("booking.max_nights_per_stay", "must be between 1 and 30")
	}
}
