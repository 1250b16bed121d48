package booking

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/presenced/presenced/internal/testenv"
	"github.com/presenced/presenced/store"
)

// Registrations draw their numbers before they commit, so they can commit
// out of order: the listing must not step past a registration still in
// flight, or its hotel is behind the cursor when it commits and is never
// listed (the viewers would answer 404 for it until a restart).
func TestHotelsSinceWaitsForARegistrationInFlight(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, err := pgxpool.New(ctx, testenv.NewDatabase(t))
	require.NoError(t, err)
	t.Cleanup(db.Close)
	_, err = store.Migrate(ctx, db, store.Migrations(), testenv.Logger())
	require.NoError(t, err)
	const insert = `INSERT INTO hotels (id, name, city, timezone, currency) VALUES ($1, $1, 'c', 'UTC', 'EUR')`

	_, err = db.Exec(ctx, insert, "first")
	require.NoError(t, err)
	ids, cursor, err := hotelsSince(ctx, db, 0, 100)
	require.NoError(t, err)
	require.Equal(t, []string{"first"}, ids)

	slow, err := db.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = slow.Rollback(ctx) }()
	_, err = slow.Exec(ctx, insert, "slow") // draws the next number, commits last
	require.NoError(t, err)
	_, err = db.Exec(ctx, insert, "fast")
	require.NoError(t, err)

	ids, next, err := hotelsSince(ctx, db, cursor, 100)
	require.NoError(t, err)
	require.Empty(t, ids, "not past the registration in flight")
	require.Equal(t, cursor, next)

	require.NoError(t, slow.Commit(ctx))
	ids, _, err = hotelsSince(ctx, db, next, 100)
	require.NoError(t, err)
	require.Equal(t, []string{"slow", "fast"}, ids)

	// A registration that failed after drawing its number leaves a gap
	// for good: the hotels after it are listed once they have settled.
	_, err = db.Exec(ctx, `UPDATE hotels SET created_at = created_at - interval '1 minute'`)
	require.NoError(t, err)
	_, err = db.Exec(ctx, insert, "fast") // a duplicate: draws a number, fails
	require.Error(t, err)
	_, err = db.Exec(ctx, insert, "after-gap")
	require.NoError(t, err)
	_, cursor, err = hotelsSince(ctx, db, 0, 100)
	require.NoError(t, err)
	ids, _, err = hotelsSince(ctx, db, cursor, 100)
	require.NoError(t, err)
	require.Empty(t, ids, "just registered behind a gap: not yet")
	_, err = db.Exec(ctx, `UPDATE hotels SET created_at = created_at - interval '1 minute' WHERE id = 'after-gap'`)
	require.NoError(t, err)
	ids, _, err = hotelsSince(ctx, db, cursor, 100)
	require.NoError(t, err)
	require.Equal(t, []string{"after-gap"}, ids)
}
