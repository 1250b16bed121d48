package payments_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/presenced/presenced/internal/outbox"
	"github.com/presenced/presenced/internal/testenv"
	"github.com/presenced/presenced/payments"
	"github.com/presenced/presenced/store"
)

// Fulfillment reads paid orders from a stream of their own: it issues the
// tickets of a paid order, and the holds, payments and inventory changes of
// the sale (one or more events per hold) never reach its consumer group.
func TestFulfillmentReadsOnlyPaidOrders(t *testing.T) {
	t.Parallel()
	s := startSale(t, 10, nil)
	for range 3 {
		s.hold(1) // events fulfillment has no use for
	}
	_, res, v, _ := s.pending(2)
	s.confirm(v)
	s.waitFulfilled(res, 2)

	ctx := context.Background()
	rdb := testenv.Redis(t)
	ks := store.NewKeyspace(s.cfg.Redis.Prefix)
	groups, err := rdb.XInfoGroups(ctx, outbox.Stream(ks)).Result()
	require.NoError(t, err)
	require.Empty(t, groups, "nobody reads the whole event stream")
	entries, err := rdb.XRange(ctx, payments.FulfillmentStream(ks), "-", "+").Result()
	require.NoError(t, err)
	require.Len(t, entries, 1)
	require.Equal(t, payments.KindOrderPaid, entries[0].Values["kind"])
	groups, err = rdb.XInfoGroups(ctx, payments.FulfillmentStream(ks)).Result()
	require.NoError(t, err)
	require.Len(t, groups, 1)
	require.EqualValues(t, 1, groups[0].EntriesRead, "fulfillment read the one paid order")
	require.Zero(t, groups[0].Pending)
}
