package booking

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/presenced/presenced/internal/testenv"
	"github.com/presenced/presenced/store"
)

// naiveStayHold is the stay hold with its defences removed: it reads the
// free rooms without locking the nights, then writes. A slow moment between
// check and write (made certain with pg_sleep) is all an overbooking needs.
func naiveStayHold(ctx context.Context, db *pgxpool.Pool, hotel, user, from, to string) (int, error) {
	tx, err := db.Begin(ctx)
	if err != nil {
		return 0, err
	}
	defer func() { _ = tx.Rollback(ctx) }()
	var free int
	if err := tx.QueryRow(ctx, `SELECT min(total - held - sold) FROM room_nights
		WHERE hotel_id = $1 AND room_type_id = 'std' AND night >= $2 AND night < $3`, hotel, from, to).Scan(&free); err != nil {
		return 0, err
	}
	if free < 1 {
		return 409, nil
	}
	if _, err := tx.Exec(ctx, `SELECT pg_sleep(0.05)`); err != nil {
		return 0, err
	}
	id := uuid.New().String()
	for _, q := range []string{
		`INSERT INTO reservations (id, kind, hotel_id, user_id, status, expires_at, total, currency)
		 VALUES (@id, 'stay', @hotel, @user, 'PENDING_PAYMENT', now() + interval '10 minutes', 0, 'EUR')`,
		`INSERT INTO stays (reservation_id, hotel_id, room_type_id, check_in, check_out, rooms, guests)
		 VALUES (@id, @hotel, 'std', @from, @to, 1, 1)`,
		`INSERT INTO stay_nights (reservation_id, night, hotel_id, room_type_id, rooms, base_price, price_at_lock)
		 SELECT @id, d::date, @hotel, 'std', 1, 0, 0 FROM generate_series(@from::date, @to::date - 1, interval '1 day') d`,
		`UPDATE room_nights SET held = held + 1 WHERE hotel_id = @hotel AND room_type_id = 'std' AND night >= @from AND night < @to`,
	} {
		args := pgx.NamedArgs{"id": id, "hotel": hotel, "user": user, "from": from, "to": to}
		if _, err := tx.Exec(ctx, q, args); err != nil {
			var pgErr *pgconn.PgError
			if errors.As(err, &pgErr) && refusedByDatabase(pgErr) {
				return 409, nil
			}
			return 0, err
		}
	}
	return 201, tx.Commit(ctx)
}

// refusedByDatabase says whether PostgreSQL aborted the naive hold without
// writing anything: a refusal, never an overbooking.
func refusedByDatabase(e *pgconn.PgError) bool {
	switch {
	case e.ConstraintName == "room_nights_no_overbooking":
		return true // the overbooking itself
	case e.Code == "40P01":
		// The naive update takes its night rows in scan order, which is
		// not a global order (a sequential or bitmap scan follows the
		// rows' physical places, which updates move): two of them can
		// deadlock, and PostgreSQL aborts one.
		return true
	case e.Code == "XX000" && strings.Contains(e.Message, "multixact has more than one updating member"):
		// PostgreSQL's own race check when several of these updates meet
		// on a row that the stay_nights inserts hold key-share locks on
		// (CI saw it once, five holds of thirty).
		return true
	}
	return false
}

// overbooked counts the hotel's nights with more rooms promised than exist.
func overbooked(t *testing.T, db *pgxpool.Pool, hotel string) int {
	t.Helper()
	var n int
	require.NoError(t, db.QueryRow(context.Background(),
		`SELECT count(*) FROM room_nights WHERE hotel_id = $1 AND held + sold > total`, hotel).Scan(&n))
	return n
}

// The race test can fail: with the CHECK constraint dropped in a scratch
// database, the hold path without row locks overbooks the shared night.
// With the constraint in place the same naive path cannot: the database
// refuses the update that would overbook. And the real path, even against
// the weakened schema, sells exactly the rooms there are: the date-ordered
// row locks alone hold the line, and the constraint is a second one.
func TestNegativeControlOverbookingWithoutTheConstraint(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	const rooms, buyers = 2, 30
	stay := func(i int) (string, string) { return night(5 + i%3), night(8 + i%2) } // all share night 7

	scratch, err := pgxpool.New(ctx, testenv.NewDatabase(t))
	require.NoError(t, err)
	t.Cleanup(scratch.Close)
	_, err = store.Migrate(ctx, scratch, store.Migrations(), testenv.Logger())
	require.NoError(t, err)
	_, err = scratch.Exec(ctx, `ALTER TABLE room_nights DROP CONSTRAINT room_nights_no_overbooking`)
	require.NoError(t, err)
	weak := setupStays(t, setupWith(t, scratch, testenv.Redis(t)))

	hotel, _ := weak.hotel(t, fmt.Sprintf("std:%dx2@100", rooms))
	statuses := race(t, buyers, func(i int) int {
		from, to := stay(i)
		s, err := naiveStayHold(ctx, scratch, hotel, fmt.Sprintf("naive%d", i), from, to)
		if err != nil {
			return 500
		}
		return s
	})
	require.Greater(t, statuses[201], rooms, "without locks and constraint more buyers win than rooms exist: %v", statuses)
	require.Positive(t, overbooked(t, scratch, hotel), "the shared night is overbooked: the invariant check detects it")

	real, _ := weak.hotel(t, fmt.Sprintf("std:%dx2@100", rooms))
	statuses = race(t, buyers, func(i int) int {
		from, to := stay(i)
		s, _, _ := weak.holdStay(t, real, fmt.Sprintf("real%d", i), "k", StayHoldRequest{RoomType: "std", CheckIn: from, CheckOut: to, Rooms: 1})
		return s
	})
	require.Equal(t, rooms, statuses[201], "%v", statuses)
	require.Zero(t, overbooked(t, scratch, real))
	weak.requireInventoryAgrees(t, real)

	// The constraint alone stops the naive path on the real schema.
	b := setupStays(t, setup(t))
	guarded, _ := b.hotel(t, fmt.Sprintf("std:%dx2@100", rooms))
	statuses = race(t, buyers, func(i int) int {
		from, to := stay(i)
		s, err := naiveStayHold(ctx, b.db, guarded, b.uid(fmt.Sprintf("naive%d", i)), from, to)
		if err != nil {
			t.Logf("naive hold %d: %v", i, err)
			return 500
		}
		return s
	})
	require.LessOrEqual(t, statuses[201], rooms, "%v", statuses)
	require.Zero(t, statuses[500], "%v", statuses)
	require.Zero(t, overbooked(t, b.db, guarded))
}
