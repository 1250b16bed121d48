package booking

import (
	"errors"
	"net/http"
	"strconv"

	"github.com/labstack/echo/v4"

	"github.com/presenced/presenced/internal/auth"
	"github.com/presenced/presenced/internal/refusal"
	"github.com/presenced/presenced/internal/validate"
	"github.com/presenced/presenced/web/wire"
)

// Routes mounts the booking plane. users authenticates buyers; admin guards
// the server-to-server endpoints.
func (h *holdsPlane) Routes(g *echo.Group, users, admin echo.MiddlewareFunc) {
	g.POST("/v1/events/:event/holds", answered(h.postHold), users)
	g.GET("/v1/reservations/:id", answered(h.getReservation), users)
	g.DELETE("/v1/reservations/:id", answered(h.cancelReservation), users)
	g.POST("/v1/admin/events", answered(h.postEvent), admin)
	g.GET("/v1/admin/events", answered(h.listEvents), admin)
	g.GET("/v1/admin/events/:event", answered(h.getEvent), admin)
	g.DELETE("/v1/admin/events/:event", answered(h.deleteEvent), admin)
	g.POST("/v1/admin/events/:event/promotions", answered(h.postPromotion), admin)
}

// answered is a booking handler whose refusals are answered as httpError
// maps them; every route of the module is mounted through it.
func answered(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error { return httpError(next(c)) }
}

// refusals are the HTTP answers to booking's refusal kinds, first match
// first (ErrPromotionExists before the ErrEventExists it wraps). A
// refusal's own message, when it has one, is the one sent.
var refusals = []wire.Refusal{
	{Kind: ErrEventNotFound, Status: http.StatusNotFound, Code: "event_not_found"},
	{Kind: ErrSectionNotFound, Status: http.StatusNotFound, Code: "section_not_found"},
	{Kind: ErrHotelNotFound, Status: http.StatusNotFound, Code: "hotel_not_found"},
	{Kind: ErrNoReservation, Status: http.StatusNotFound, Code: "not_found"},
	{Kind: ErrNotCancellable, Status: http.StatusConflict, Code: "not_cancellable"},
	{Kind: ErrPromotionExists, Status: http.StatusConflict, Code: "promotion_exists", Message: "this promotion code exists"},
	{Kind: ErrEventExists, Status: http.StatusConflict, Code: "event_exists", Message: "an event with this id exists"},
	{Kind: ErrHotelExists, Status: http.StatusConflict, Code: "hotel_exists", Message: "a hotel with this id exists"},
	{Kind: ErrEventInUse, Status: http.StatusConflict, Code: "event_in_use",
		Message: "the event has reservations pending payment or paid, or payment records: it cannot be deleted"},
	{Kind: ErrSaleClosed, Status: http.StatusConflict, Code: "sale_closed"},
	{Kind: ErrPendingCheckout, Status: http.StatusConflict, Code: "pending_checkout"},
	{Kind: ErrSeatsUnavailable, Status: http.StatusConflict, Code: "seats_unavailable"},
	{Kind: ErrNoSeatsAvailable, Status: http.StatusConflict, Code: "no_seats_available"},
	{Kind: ErrSeatsBeingHeld, Status: http.StatusConflict, Code: "seats_being_held"},
	{Kind: ErrUnknownSeats, Status: http.StatusBadRequest, Code: "unknown_seats"},
	{Kind: ErrUnknownRoomType, Status: http.StatusBadRequest, Code: "unknown_room_type"},
	{Kind: ErrRoomsUnavailable, Status: http.StatusConflict, Code: "rooms_unavailable"},
	{Kind: ErrDatesUnavailable, Status: http.StatusUnprocessableEntity, Code: "dates_unavailable"},
	{Kind: ErrTooManyGuests, Status: http.StatusUnprocessableEntity, Code: "too_many_guests"},
	{Kind: ErrInvalidPromoCode, Status: http.StatusUnprocessableEntity, Code: "invalid_promo_code"},
	{Kind: ErrPromotionExhausted, Status: http.StatusConflict, Code: "promotion_exhausted"},
	{Kind: ErrPromotionUsed, Status: http.StatusConflict, Code: "promotion_already_used"},
	{Kind: ErrPriceError, Status: http.StatusUnprocessableEntity, Code: "price_error"},
	{Kind: ErrRateLimited, Status: http.StatusTooManyRequests, Code: "rate_limited"},
	{Kind: ErrNotAdmitted, Status: http.StatusForbidden, Code: "not_admitted"},
	{Kind: ErrKeyRequired, Status: http.StatusBadRequest, Code: "idempotency_key_required"},
	{Kind: ErrBadKey, Status: http.StatusBadRequest, Code: "bad_idempotency_key"},
	{Kind: ErrKeyReused, Status: http.StatusUnprocessableEntity, Code: "idempotency_key_reused"},
	{Kind: ErrInvalidEvent, Status: http.StatusUnprocessableEntity, Code: "invalid_event"},
	{Kind: ErrInvalidPromotion, Status: http.StatusUnprocessableEntity, Code: "invalid_promotion"},
	{Kind: ErrInvalidHotel, Status: http.StatusUnprocessableEntity, Code: "invalid_hotel"},
	{Kind: ErrInvalidRates, Status: http.StatusUnprocessableEntity, Code: "invalid_rates"},
}

// httpError is the HTTP answer to err: booking's refusals as refusals maps
// them, with the data a refusal carries as details of the error object;
// anything else as it is (a lost store 503, else 500).
func httpError(err error) error {
	var taken *SeatsTakenError
	var unknown *UnknownSeatsError
	var pending *PendingCheckoutError
	var full *RoomsFullError
	var none *NoSeatsError
	var details map[string]any
	switch {
	case err == nil:
		return nil
	case errors.As(err, &taken):
		details = map[string]any{"seats": taken.Seats}
	case errors.As(err, &unknown):
		details = map[string]any{"seats": unknown.Seats}
	case errors.As(err, &pending) && pending.Reservation != "":
		details = map[string]any{"reservation": pending.Reservation}
	case errors.As(err, &full):
		details = map[string]any{"nights": full.Nights}
	case errors.As(err, &none):
		details = map[string]any{"section": none.Section, "free": none.Free}
	case errors.Is(err, ErrSeatsBeingHeld):
		// Retry-After counts whole seconds; a client may come back sooner.
		details = map[string]any{"retryAfterMs": refusal.RetryAfter(err).Milliseconds()}
	}
	answer := wire.Refused(err, refusals)
	if e, ok := answer.(*wire.Error); ok && details != nil {
		e.Details = details
	}
	return answer
}

// statusOf is the status err is answered with (for the outcome metrics).
func statusOf(err error) int {
	var apiErr *wire.Error
	if errors.As(err, &apiErr) {
		return apiErr.Status
	}
	return http.StatusInternalServerError
}

// holdBody names seats, or asks for the best available of a section
// (best_available.go).
type holdBody struct {
	Seats     []int64 `json:"seats"`
	PromoCode string  `json:"promoCode,omitempty"`
	Section   *string `json:"section"`
	Quantity  int     `json:"quantity"`
	Adjacent  bool    `json:"adjacent"`
	MaxPrice  int64   `json:"maxPrice"`
}

func (h *holdsPlane) postHold(c echo.Context) error {
	status := http.StatusInternalServerError
	timer := h.m.holdDuration
	defer func() { h.m.holdOutcomes.WithLabelValues(strconv.Itoa(status)).Inc() }()
	start := nowFunc()
	defer func() { timer.Observe(nowFunc().Sub(start).Seconds()) }()

	var body holdBody
	if err := wire.DecodeBody(c, &body); err != nil {
		status = http.StatusBadRequest
		return err
	}
	in := holdInput{
		User:      auth.UserID(c),
		Event:     c.Param("event"),
		Pass:      c.Request().Header.Get(HeaderAdmissionPass),
		Key:       c.Request().Header.Get(HeaderIdempotencyKey),
		Seats:     body.Seats,
		PromoCode: body.PromoCode,
	}
	var res holdResult
	var err error
	switch {
	case body.Section == nil && (body.Quantity != 0 || body.Adjacent || body.MaxPrice != 0):
		err = refusal.Invalid("quantity, adjacent and maxPrice ask for the best seats of a section: name the section")
	case body.Section != nil:
		res, err = h.HoldBest(c.Request().Context(), in,
			bestInput{Section: *body.Section, Quantity: body.Quantity, Adjacent: body.Adjacent, MaxPrice: body.MaxPrice})
	default:
		res, err = h.Hold(c.Request().Context(), in)
	}
	if err != nil {
		err = httpError(err)
		status = statusOf(err)
		return err
	}
	status = res.Status
	if res.Replayed {
		c.Response().Header().Set("Idempotent-Replayed", "true")
	}
	return c.JSONBlob(res.Status, res.Body)
}

func (h *holdsPlane) getReservation(c echo.Context) error {
	id, err := reservationID(c)
	if err != nil {
		return err
	}
	res, err := loadReservation(c.Request().Context(), h.db, id, auth.UserID(c))
	if errors.Is(err, ErrNoReservation) {
		return err
	}
	if err != nil {
		return storeError("read reservation", err)
	}
	return c.JSON(http.StatusOK, res)
}

func (h *holdsPlane) cancelReservation(c echo.Context) error {
	id, err := reservationID(c)
	if err != nil {
		return err
	}
	res, err := h.Cancel(c.Request().Context(), id, auth.UserID(c))
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, res)
}

func reservationID(c echo.Context) (string, error) {
	// Only the canonical form: uuid.Parse also reads urn:uuid:… and
	// braces, which PostgreSQL refuses (a 500 before).
	id, err := validate.UUID("reservation id", c.Param("id"))
	if err != nil {
		return "", ErrNoReservation
	}
	return id, nil
}

func (h *holdsPlane) postEvent(c echo.Context) error {
	var spec EventSpec
	if err := wire.DecodeBody(c, &spec); err != nil {
		return err
	}
	sum, err := createEvent(c.Request().Context(), h.db, spec)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusCreated, sum)
}

func (h *holdsPlane) postPromotion(c echo.Context) error {
	var spec PromotionSpec
	if err := wire.DecodeBody(c, &spec); err != nil {
		return err
	}
	if err := createPromotion(c.Request().Context(), h.db, c.Param("event"), spec); err != nil {
		return err
	}
	return c.JSON(http.StatusCreated, spec)
}
