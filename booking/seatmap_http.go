package booking

import (
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/presenced/presenced/internal/refusal"
)

// seatOrder documents the fixed order of seats in maps and bitmaps.
const seatOrder = "section,row,number"

// RoutesSeats mounts GET /v1/events/:event/seats. Seat maps are public:
// they show availability, never who holds what.
func (s *seatMap) RoutesSeats(g *echo.Group) {
	g.Match([]string{http.MethodGet, http.MethodHead}, "/v1/events/:event/seats", answered(s.getSeats))
	g.GET("/v1/events/:event/sections", answered(s.getSections))
}

// getSections answers the sections of the seat map without their seats:
// from the same cached snapshot, a few hundred bytes instead of a map of
// every seat.
func (s *seatMap) getSections(c echo.Context) error {
	l, packed, err := s.current(c.Request().Context(), c.Param("event"))
	if err != nil {
		return err
	}
	v := l.view(packed, 0, 0, time.Now())
	c.Response().Header().Set(echo.HeaderCacheControl, "public, max-age=1")
	return c.JSON(http.StatusOK, SectionsView{Event: v.Event, Currency: v.Currency, SeatCount: len(l.seats), Sections: v.Sections})
}

func (s *seatMap) getSeats(c echo.Context) error {
	ctx := c.Request().Context()
	l, packed, err := s.current(ctx, c.Param("event"))
	if err != nil {
		return err
	}
	from, n := 0, len(l.seats)
	if sec := c.QueryParam("section"); sec != "" {
		i := l.sectionIndex(sec)
		if i < 0 {
			return refusal.New(ErrSectionNotFound, "no section %q in this event", sec)
		}
		from, n = l.sections[i].first, l.sections[i].count
	}
	c.Response().Header().Set(echo.HeaderCacheControl, "public, max-age=1")
	if c.QueryParam("format") == "bitmap" || strings.Contains(c.Request().Header.Get(echo.HeaderAccept), echo.MIMEOctetStream) {
		h := c.Response().Header()
		h.Set("X-Seat-Count", strconv.Itoa(n))
		h.Set("X-Seat-First", strconv.Itoa(from))
		h.Set("X-Seat-Order", seatOrder)
		h.Set("X-Seat-States", "0=AVAILABLE,1=HELD,2=SOLD,3=BLOCKED")
		return c.Blob(http.StatusOK, echo.MIMEOctetStream, repack(packed, from, n))
	}
	return c.JSON(http.StatusOK, l.view(packed, from, n, time.Now()))
}

func (l *layout) sectionIndex(id string) int {
	for i, sec := range l.sections {
		if sec.ID == id {
			return i
		}
	}
	return -1
}

func (l *layout) view(packed []byte, from, n int, now time.Time) SeatMapView {
	v := SeatMapView{Event: l.event, Currency: l.currency, SeatCount: n, Order: seatOrder}
	for _, sec := range l.sections {
		occupied, available := 0, 0
		for i := sec.first; i < sec.first+sec.count; i++ {
			switch stateAt(packed, i) {
			case 0:
				available++
			case 1, 2:
				occupied++
			}
		}
		v.Sections = append(v.Sections, SectionView{
			ID: sec.ID, Name: sec.Name, BasePrice: sec.BasePrice, SeatCount: sec.count, Available: available,
			MultiplierBps: multiplier(int64(occupied), int64(sec.count), l.startsAt.Sub(now)),
		})
	}
	v.Seats = make([]SeatView, n)
	for i := 0; i < n; i++ {
		seat := l.seats[from+i]
		v.Seats[i] = SeatView{ID: seat.id, Section: l.sections[seat.section].ID, Row: seat.row, Number: seat.num,
			Status: stateName[stateAt(packed, from+i)], BasePrice: seat.basePrice}
	}
	return v
}
