package viewers

import (
	"context"
	"sync"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/presenced/presenced/internal/testenv"
)

// lateDirectory numbers hotels as a sequence does and shows each only once
// its transaction committed, in any order.
type lateDirectory struct {
	mu   sync.Mutex
	rows []lateRow // by seq
}

type lateRow struct {
	seq       int64
	id        string
	committed bool
}

func (d *lateDirectory) commit(id string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for i := range d.rows {
		if d.rows[i].id == id {
			d.rows[i].committed = true
		}
	}
}

func (d *lateDirectory) HotelsSince(_ context.Context, cursor int64, limit int) ([]string, int64, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	var ids []string
	next := cursor
	for _, r := range d.rows {
		if r.seq > cursor && r.committed && len(ids) < limit {
			ids = append(ids, r.id)
			next = r.seq
		}
	}
	return ids, next, nil
}

// Two hotels registered at once: number 2 commits first and is read; number
// 1 commits just after. The registry still learns number 1 (before the
// fix its cursor had passed 2, and hotel 1 stayed a 404 until a restart).
func TestRegistryLearnsAHotelThatCommittedLate(t *testing.T) {
	dir := &lateDirectory{rows: []lateRow{{seq: 1, id: "slow-commit"}, {seq: 2, id: "fast-commit"}}}
	m, err := newMetrics(prometheus.NewRegistry())
	require.NoError(t, err)
	r := newRegistry(dir, 0, m, testenv.Logger())

	dir.commit("fast-commit")
	require.NoError(t, r.refresh(context.Background()))
	require.NoError(t, r.check("fast-commit"))
	require.Error(t, r.check("slow-commit"), "not committed yet")

	dir.commit("slow-commit")
	require.NoError(t, r.refresh(context.Background()))
	require.NoError(t, r.check("slow-commit"), "a hotel that committed after a later-numbered one is still learned")
	require.Len(t, *r.known.Load(), 2)
}
