package waitingroom

import (
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/presenced/presenced/internal/testenv"
)

func TestAdminListsRoomsWithStats(t *testing.T) {
	t.Parallel()
	s := newServer(t, setup(t, testenv.Redis(t), nil))
	var page RoomList
	code, _ := s.call(t, http.MethodGet, "/v1/admin/waitingrooms", "", nil, nil)
	require.Equal(t, http.StatusUnauthorized, code, "API key required")
	code, _ = s.call(t, http.MethodGet, "/v1/admin/waitingrooms", "admin", nil, &page)
	require.Equal(t, http.StatusOK, code)
	require.Empty(t, page.Rooms, "a fresh key space has no rooms")

	s.openRoom(t, "b-sale", Settings{Capacity: 3, Batch: 1})
	s.openRoom(t, "a-sale", Settings{Capacity: 2, Batch: 2})
	code, _ = s.call(t, http.MethodPost, "/v1/waitingroom/b-sale/join", "u1", nil, nil)
	require.Equal(t, http.StatusOK, code)

	code, _ = s.call(t, http.MethodGet, "/v1/admin/waitingrooms?limit=1", "admin", nil, &page)
	require.Equal(t, http.StatusOK, code)
	require.Len(t, page.Rooms, 1)
	require.Equal(t, "a-sale", page.Rooms[0].Event)
	require.Equal(t, 2, page.Rooms[0].Settings.Capacity)
	require.Equal(t, "a-sale", page.Next)

	after := page.Next
	page = RoomList{}
	code, _ = s.call(t, http.MethodGet, "/v1/admin/waitingrooms?limit=1&after="+after, "admin", nil, &page)
	require.Equal(t, http.StatusOK, code)
	require.Len(t, page.Rooms, 1)
	require.Equal(t, "b-sale", page.Rooms[0].Event)
	require.Equal(t, 1, page.Rooms[0].Stats.Queued)
	require.Equal(t, 3, page.Rooms[0].Stats.Capacity)
	require.Empty(t, page.Next, "the last page")

	code, _ = s.call(t, http.MethodGet, "/v1/admin/waitingrooms?limit=1000", "admin", nil, nil)
	require.Equal(t, http.StatusBadRequest, code)
}
