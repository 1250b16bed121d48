package booking

import (
	"context"
	"fmt"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/presenced/presenced/internal/testenv"
	"github.com/presenced/presenced/store"
)

// naiveHold is the hold path with its defences removed: it checks the seats
// without locking them, then writes. A slow moment between check and write
// (here made certain: checked returns once other buyers have checked too)
// is all a double sale needs.
func naiveHold(ctx context.Context, db *pgxpool.Pool, event, user string, seats []int64, checked func()) (int, error) {
	tx, err := db.Begin(ctx)
	if err != nil {
		return 0, err
	}
	defer func() { _ = tx.Rollback(ctx) }()
	var free int
	if err := tx.QueryRow(ctx, `SELECT count(*) FROM seats WHERE event_id = $1 AND id = ANY($2) AND status = 'AVAILABLE'`,
		event, seats).Scan(&free); err != nil {
		return 0, err
	}
	if free != len(seats) {
		return 409, nil
	}
	checked()
	id := uuid.New().String()
	if _, err := tx.Exec(ctx, `INSERT INTO reservations (id, event_id, user_id, status, expires_at, total, currency)
		VALUES ($1, $2, $3, 'PENDING_PAYMENT', now() + interval '10 minutes', 0, 'EUR')`, id, event, user); err != nil {
		return 0, err
	}
	for _, s := range seats {
		if _, err := tx.Exec(ctx, `INSERT INTO reservation_items (reservation_id, seat_id, section_id, base_price, surge_bps, discount, price_at_lock, status)
			VALUES ($1, $2, 'A', 0, 10000, 0, 0, 'HELD')`, id, s); err != nil {
			return 0, err
		}
	}
	if _, err := tx.Exec(ctx, `UPDATE seats SET status = 'HELD', reservation_id = $1 WHERE id = ANY($2)`, id, seats); err != nil {
		return 0, err
	}
	return 201, tx.Commit(ctx)
}

// doubleOwned counts seats of event with more than one live item.
func (b *bundle) doubleOwned(t *testing.T, event string) int {
	n := 0
	for _, c := range b.liveItems(t, event) {
		if c > 1 {
			n++
		}
	}
	return n
}

// The race test can fail: with the unique index and the seat-state trigger
// dropped in a scratch database, the hold path without row locks sells a
// seat twice. The real path holds the line with either defence alone: a
// seat becomes HELD only from AVAILABLE, under its row lock (the trigger),
// and one live item per seat (the index).
func TestNegativeControlDoubleSaleWithoutDefences(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dsn := testenv.NewDatabase(t)
	scratch, err := pgxpool.New(ctx, dsn)
	require.NoError(t, err)
	t.Cleanup(scratch.Close)
	_, err = store.Migrate(ctx, scratch, store.Migrations(), testenv.Logger())
	require.NoError(t, err)
	_, err = scratch.Exec(ctx, `DROP TRIGGER seat_held_only_when_available ON seats`)
	require.NoError(t, err)
	_, err = scratch.Exec(ctx, `DROP INDEX one_live_owner_per_seat`)
	require.NoError(t, err)
	b := setupWith(t, scratch, testenv.Redis(t))

	event, seats := b.event(t, "A:1x10@100")
	cart := []int64{seats[0], seats[1]}
	// The first three buyers all check the seats before any of them
	// writes, however the machine schedules them (a sleep between check
	// and write was not enough on a loaded machine). Three, not more: the
	// pool's fourth connection serves the others meanwhile.
	const together = 3
	var arrived atomic.Int32
	all := make(chan struct{})
	checked := func() {
		if arrived.Add(1) == together {
			close(all)
		}
		select {
		case <-all:
		case <-time.After(30 * time.Second):
		}
	}
	statuses := race(t, 30, func(i int) int {
		s, err := naiveHold(ctx, scratch, event, fmt.Sprintf("naive%d", i), cart, checked)
		if err != nil {
			return 500
		}
		return s
	})
	require.Greater(t, statuses[201], 1, "without locks and index several buyers win: %v", statuses)
	require.Positive(t, b.doubleOwned(t, event), "a seat was sold twice: the invariant check detects it")

	// The real path, hints dropped as they go, against the schema with one
	// defence back at a time (the naive sales released, so the index can
	// be built again).
	_, err = scratch.Exec(ctx, `UPDATE reservation_items SET status = 'RELEASED'
		WHERE reservation_id IN (SELECT id FROM reservations WHERE event_id = $1)`, event)
	require.NoError(t, err)
	for round, defence := range []string{
		`CREATE UNIQUE INDEX one_live_owner_per_seat ON reservation_items (seat_id) WHERE status IN ('HELD', 'SOLD', 'CHECKED_IN')`,
		`DROP INDEX one_live_owner_per_seat; CREATE TRIGGER seat_held_only_when_available BEFORE UPDATE OF status ON seats
		 FOR EACH ROW WHEN (NEW.status = 'HELD' AND OLD.status <> 'AVAILABLE') EXECUTE FUNCTION seat_held_only_when_available()`,
	} {
		_, err = scratch.Exec(ctx, defence)
		require.NoError(t, err)
		event2, seats2 := b.event(t, "A:1x10@100")
		cart2 := []int64{seats2[0], seats2[1]}
		// Buyers new to each round: a round's winner retrying its key for
		// another cart would rightly be told 422.
		statuses = race(t, 30, func(i int) int {
			_ = b.rdb.Del(ctx, b.holds.hints.hintKeys(event2, cart2)...).Err()
			s, _, err := b.hold(t, event2, fmt.Sprintf("real%d-%d", round, i), "k", cart2, "")
			if s != http.StatusCreated && s != http.StatusConflict {
				t.Logf("%s: %v", defence, err)
			}
			return s
		})
		require.Equal(t, 1, statuses[201], "%s: %v", defence, statuses)
		require.Zero(t, b.doubleOwned(t, event2), defence)
		var held int
		require.NoError(t, scratch.QueryRow(ctx, `SELECT count(*) FROM seats WHERE event_id = $1 AND status = 'HELD'`, event2).Scan(&held))
		require.Equal(t, 2, held, defence)
	}
}
