package waitingroom

import (
	"errors"
	"net/http"
	"slices"
	"strconv"

	"github.com/labstack/echo/v4"

	"github.com/presenced/presenced/web/wire"
)

// Page sizes of GET /v1/admin/waitingrooms: each room costs a stats script
// of its own.
const (
	roomPageDefault = 50
	roomPageMax     = 200
)

// GET /v1/admin/waitingrooms?after=&limit=: the registered rooms in event
// order, each with its settings and live statistics.
func (h *handlers) listRooms(c echo.Context) error {
	limit := roomPageDefault
	if s := c.QueryParam("limit"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > roomPageMax {
			return wire.BadRequest("limit must be an integer within 1..%d", roomPageMax)
		}
		limit = n
	}
	after := c.QueryParam("after")
	ctx, cancel := h.storeCtx(c)
	defer cancel()
	events, _, err := h.m.line.Events(ctx)
	if err != nil {
		return h.fail("list", err)
	}
	slices.Sort(events)
	start, _ := slices.BinarySearch(events, after)
	if start < len(events) && events[start] == after {
		start++
	}
	page := RoomList{Rooms: []RoomView{}}
	for _, event := range events[start:] {
		if len(page.Rooms) == limit {
			page.Next = page.Rooms[len(page.Rooms)-1].Event
			break
		}
		s, err := h.m.line.Settings(ctx, event)
		if errors.Is(err, errNoRoom) {
			continue // deleted while listing
		}
		if err != nil {
			return h.fail("list", err)
		}
		st, err := h.m.line.Stats(ctx, event)
		if errors.Is(err, errNoRoom) {
			continue
		}
		if err != nil {
			return h.fail("list", err)
		}
		st.Capacity = s.Capacity
		page.Rooms = append(page.Rooms, RoomView{Event: event, Settings: s, Stats: st})
	}
	h.m.metrics.requests.WithLabelValues("list", "ok").Inc()
	return c.JSON(http.StatusOK, page)
}
