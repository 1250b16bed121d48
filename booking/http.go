package booking

import (
	"errors"
	"net/http"
	"strconv"

	"github.com/labstack/echo/v4"

	"github.com/presenced/presenced/internal/auth"
	"github.com/presenced/presenced/internal/validate"
	"github.com/presenced/presenced/web/wire"
)

// Routes mounts the booking plane. users authenticates buyers; admin guards
// the server-to-server endpoints.
func (h *holdsPlane) Routes(g *echo.Group, users, admin echo.MiddlewareFunc) {
	g.POST("/v1/events/:event/holds", h.postHold, users)
	g.GET("/v1/reservations/:id", h.getReservation, users)
	g.DELETE("/v1/reservations/:id", h.cancelReservation, users)
	g.POST("/v1/admin/events", h.postEvent, admin)
	g.GET("/v1/admin/events", h.listEvents, admin)
	g.GET("/v1/admin/events/:event", h.getEvent, admin)
	g.DELETE("/v1/admin/events/:event", h.deleteEvent, admin)
	g.POST("/v1/admin/events/:event/promotions", h.postPromotion, admin)
}

type holdBody struct {
	Seats     []int64 `json:"seats"`
	PromoCode string  `json:"promoCode,omitempty"`
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
	res, err := h.Hold(c.Request().Context(), holdInput{
		User:      auth.UserID(c),
		Event:     c.Param("event"),
		Pass:      c.Request().Header.Get(HeaderAdmissionPass),
		Key:       c.Request().Header.Get(HeaderIdempotencyKey),
		Seats:     body.Seats,
		PromoCode: body.PromoCode,
	})
	if err != nil {
		var apiErr *wire.Error
		if errors.As(err, &apiErr) {
			status = apiErr.Status
		}
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
	if errors.Is(err, errNoReservation) {
		return wire.Errorf(http.StatusNotFound, "not_found", "no such reservation")
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
		return "", wire.Errorf(http.StatusNotFound, "not_found", "no such reservation")
	}
	return id, nil
}

func (h *holdsPlane) postEvent(c echo.Context) error {
	var spec EventSpec
	if err := wire.DecodeBody(c, &spec); err != nil {
		return err
	}
	sum, err := createEvent(c.Request().Context(), h.db, spec)
	switch {
	case errors.Is(err, ErrEventExists):
		return wire.Errorf(http.StatusConflict, "event_exists", "an event with this id exists")
	case errors.Is(err, ErrInvalidEvent):
		return wire.Errorf(http.StatusUnprocessableEntity, "invalid_event", "%s", err.Error())
	case err != nil:
		return err
	}
	return c.JSON(http.StatusCreated, sum)
}

func (h *holdsPlane) postPromotion(c echo.Context) error {
	var spec PromotionSpec
	if err := wire.DecodeBody(c, &spec); err != nil {
		return err
	}
	err := createPromotion(c.Request().Context(), h.db, c.Param("event"), spec)
	switch {
	case errors.Is(err, errNoEvent):
		return wire.Errorf(http.StatusNotFound, "event_not_found", "no such event")
	case errors.Is(err, ErrEventExists):
		return wire.Errorf(http.StatusConflict, "promotion_exists", "this promotion code exists")
	case errors.Is(err, ErrInvalidPromotion):
		return wire.Errorf(http.StatusUnprocessableEntity, "invalid_promotion", "%s", err.Error())
	case err != nil:
		return err
	}
	return c.JSON(http.StatusCreated, spec)
}
