package booking

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
)

// The checkout port payments calls: a pending hold becomes PAID with its
// seats SOLD, in the caller's transaction; anything not pending, or a hold
// whose time is up, is refused and nothing changes; an early release gives
// the seats back.
func TestCheckoutPort(t *testing.T) {
	t.Parallel()
	b := setup(t)
	m := &Module{holds: b.holds}
	ctx := context.Background()
	event, seats := b.event(t, "A:1x4@1000")

	settle := func(f func(tx pgx.Tx) error) error {
		return pgx.BeginFunc(ctx, b.db, func(tx pgx.Tx) error { return f(tx) })
	}
	status, paid, err := b.hold(t, event, "payer", "k1", seats[:2], "")
	require.NoError(t, err)
	require.Equal(t, 201, status)
	require.NoError(t, settle(func(tx pgx.Tx) error {
		c, err := m.LockCheckout(ctx, tx, paid.ID)
		require.NoError(t, err)
		require.Equal(t, StatusPending, c.Status)
		require.Equal(t, paid.Total, c.Total)
		require.False(t, c.Due)
		require.Equal(t, event, c.Admits(), "a seat's ticket admits to its event")
		return m.MarkPaid(ctx, tx, paid.ID)
	}))
	var sold int
	require.NoError(t, b.db.QueryRow(ctx, `SELECT count(*) FROM seats WHERE reservation_id = $1 AND status = 'SOLD'`, paid.ID).Scan(&sold))
	require.Equal(t, 2, sold)
	err = settle(func(tx pgx.Tx) error { return m.MarkPaid(ctx, tx, paid.ID) })
	require.ErrorIs(t, err, ErrNotPending, "paid twice")
	_, err = m.ReleaseCheckout(ctx, mustTx(t, b), paid.ID)
	require.ErrorIs(t, err, ErrNotPending, "a paid checkout is not released")

	status, late, err := b.hold(t, event, "late", "k2", seats[2:3], "")
	require.NoError(t, err)
	require.Equal(t, 201, status)
	_, err = b.db.Exec(ctx, `UPDATE reservations SET expires_at = now() - interval '1 second' WHERE id = $1`, late.ID)
	require.NoError(t, err)
	err = settle(func(tx pgx.Tx) error { return m.MarkPaid(ctx, tx, late.ID) })
	require.ErrorIs(t, err, ErrNotPending, "a hold whose time is up is not sold, even before the expiry worker ran")

	status, gone, err := b.hold(t, event, "gone", "k3", seats[3:], "")
	require.NoError(t, err)
	require.Equal(t, 201, status)
	var after func(context.Context)
	require.NoError(t, settle(func(tx pgx.Tx) error {
		var err error
		after, err = m.ReleaseCheckout(ctx, tx, gone.ID)
		return err
	}))
	after(ctx)
	var free int
	require.NoError(t, b.db.QueryRow(ctx, `SELECT count(*) FROM seats WHERE id = $1 AND status = 'AVAILABLE'`, seats[3]).Scan(&free))
	require.Equal(t, 1, free)

	err = settle(func(tx pgx.Tx) error {
		_, err := m.LockCheckout(ctx, tx, "00000000-0000-0000-0000-000000000000")
		return err
	})
	require.ErrorIs(t, err, ErrNoReservation)
	b.requireNoDoubleOwnership(t, event)

	var lines []Line
	require.NoError(t, settle(func(tx pgx.Tx) error {
		var err error
		lines, err = m.Lines(ctx, tx, paid.ID)
		return err
	}))
	require.Len(t, lines, 2, "a ticket per seat")
	require.Equal(t, "Section A, row 1, seat 1", lines[0].Label)
	require.Equal(t, "Section A, row 1, seat 2", lines[1].Label)
	require.NotEqual(t, lines[0].ID, lines[1].ID)
}

// The same port settles stays: a pending stay becomes PAID with every night
// moved from held to sold; a stay whose time is up is refused; an early
// release gives every night back; its lines are one per room.
func TestCheckoutPortWithStays(t *testing.T) {
	t.Parallel()
	b := setupStays(t, setup(t))
	m := &Module{holds: b.holds}
	ctx := context.Background()
	hotel, _ := b.hotel(t, "dbl:3x2@10000", func(s *HotelSpec) { s.Name = "Casa Azul" })
	settle := func(f func(tx pgx.Tx) error) error {
		return pgx.BeginFunc(ctx, b.db, func(tx pgx.Tx) error { return f(tx) })
	}
	status, paid, err := b.holdStay(t, hotel, "payer", "k1", StayHoldRequest{RoomType: "dbl", CheckIn: night(4), CheckOut: night(6), Rooms: 2})
	require.NoError(t, err)
	require.Equal(t, 201, status)
	var lines []Line
	require.NoError(t, settle(func(tx pgx.Tx) error {
		c, err := m.LockCheckout(ctx, tx, paid.ID)
		require.NoError(t, err)
		require.Equal(t, KindStay, c.Kind)
		require.Equal(t, hotel, c.Hotel)
		require.Empty(t, c.Event)
		require.Equal(t, "hotel:"+hotel, c.Admits(), "a stay's voucher admits to its hotel, never to an event of that name")
		require.Equal(t, int64(40000), c.Total)
		require.Equal(t, StatusPending, c.Status)
		_, err = m.Lines(ctx, tx, paid.ID)
		require.ErrorIs(t, err, ErrNotPending, "a pending stay has sold nothing yet")
		if err := m.MarkPaid(ctx, tx, paid.ID); err != nil {
			return err
		}
		lines, err = m.Lines(ctx, tx, paid.ID)
		return err
	}))
	require.Equal(t, []Line{
		{ID: "stay:" + paid.ID + ":room-1", Label: "Casa Azul, dbl, " + night(4) + " to " + night(6) + " (2 nights), room 1 of 2"},
		{ID: "stay:" + paid.ID + ":room-2", Label: "Casa Azul, dbl, " + night(4) + " to " + night(6) + " (2 nights), room 2 of 2"},
	}, lines, "a voucher per room, unique across reservations")
	for _, d := range []int{4, 5} {
		_, held, sold := b.counters(t, hotel, "dbl", night(d))
		require.Equal(t, [2]int{0, 2}, [2]int{held, sold}, "night %d sold", d)
	}
	require.ErrorIs(t, settle(func(tx pgx.Tx) error { return m.MarkPaid(ctx, tx, paid.ID) }), ErrNotPending, "paid twice")
	_, err = b.stays.Cancel(ctx, paid.ID, b.uid("payer"))
	require.Equal(t, 409, answerOf(err).Status, "a paid stay is not cancellable")
	require.ErrorIs(t, settle(func(tx pgx.Tx) error {
		_, err := m.ReleaseCheckout(ctx, tx, paid.ID)
		return err
	}), ErrNotPending, "a paid stay is not released")

	status, late, err := b.holdStay(t, hotel, "late", "k2", StayHoldRequest{RoomType: "dbl", CheckIn: night(4), CheckOut: night(5), Rooms: 1})
	require.NoError(t, err)
	require.Equal(t, 201, status)
	b.expireNow(t, late.ID)
	require.ErrorIs(t, settle(func(tx pgx.Tx) error { return m.MarkPaid(ctx, tx, late.ID) }), ErrNotPending,
		"a stay whose time is up is not sold, even before the expiry worker ran")

	status, gone, err := b.holdStay(t, hotel, "gone", "k3", StayHoldRequest{RoomType: "dbl", CheckIn: night(5), CheckOut: night(8), Rooms: 1})
	require.NoError(t, err)
	require.Equal(t, 201, status)
	var after func(context.Context)
	require.NoError(t, settle(func(tx pgx.Tx) error {
		var err error
		after, err = m.ReleaseCheckout(ctx, tx, gone.ID)
		return err
	}))
	after(ctx)
	require.Equal(t, StatusCancelled, b.status(t, gone.ID))
	for _, d := range []int{6, 7} {
		_, held, _ := b.counters(t, hotel, "dbl", night(d))
		require.Zero(t, held, "night %d given back", d)
	}
	b.requireInventoryAgrees(t, hotel)
}

func mustTx(t *testing.T, b *bundle) pgx.Tx {
	t.Helper()
	tx, err := b.db.Begin(context.Background())
	require.NoError(t, err)
	t.Cleanup(func() { _ = tx.Rollback(context.Background()) })
	return tx
}

// A paid checkout's lines are its sold seats, one each, with labels; a
// checkout not paid has none to issue tickets for.
func TestCheckoutLines(t *testing.T) {
	t.Parallel()
	b := setup(t)
	m := &Module{holds: b.holds}
	ctx := context.Background()
	event, seats := b.event(t, "L:1x3@1000")
	status, res, err := b.hold(t, event, "liner", "k1", seats[:2], "")
	require.NoError(t, err)
	require.Equal(t, 201, status)
	err = pgx.BeginFunc(ctx, b.db, func(tx pgx.Tx) error {
		_, err := m.Lines(ctx, tx, res.ID)
		return err
	})
	require.ErrorIs(t, err, ErrNotPending, "a pending checkout sold nothing yet")
	require.NoError(t, pgx.BeginFunc(ctx, b.db, func(tx pgx.Tx) error { return m.MarkPaid(ctx, tx, res.ID) }))
	var lines []Line
	require.NoError(t, pgx.BeginFunc(ctx, b.db, func(tx pgx.Tx) error {
		var err error
		lines, err = m.Lines(ctx, tx, res.ID)
		return err
	}))
	require.Len(t, lines, 2)
	require.NotEqual(t, lines[0].ID, lines[1].ID)
	require.Equal(t, "Section L, row 1, seat 1", lines[0].Label)
	require.Equal(t, "Section L, row 1, seat 2", lines[1].Label)
	err = pgx.BeginFunc(ctx, b.db, func(tx pgx.Tx) error {
		_, err := m.Lines(ctx, tx, "00000000-0000-0000-0000-000000000000")
		return err
	})
	require.ErrorIs(t, err, ErrNoReservation)
	require.NoError(t, pgx.BeginFunc(ctx, b.db, func(tx pgx.Tx) error {
		n, err := m.DoubleOwnedSeats(ctx, tx)
		require.Zero(t, n)
		return err
	}))
}
