package booking

import (
	"net/http"
	"strconv"

	"github.com/labstack/echo/v4"

	"github.com/presenced/presenced/internal/auth"
	"github.com/presenced/presenced/web/wire"
)

// Routes mounts stay holds and hotel administration. Reservations of stays
// are read and cancelled through the holds plane's /v1/reservations/{id}.
func (s *staysPlane) Routes(g *echo.Group, users, admin echo.MiddlewareFunc) {
	g.POST("/v1/hotels/:hotel/holds", answered(s.postStayHold), users)
	g.POST("/v1/admin/hotels", answered(s.postHotel), admin)
	g.PUT("/v1/admin/hotels/:hotel/rates", answered(s.putRates), admin)
}

func (s *staysPlane) postStayHold(c echo.Context) error {
	status := http.StatusInternalServerError
	start := nowFunc()
	defer func() {
		s.sm.holdOutcomes.WithLabelValues(strconv.Itoa(status)).Inc()
		s.sm.holdDuration.Observe(nowFunc().Sub(start).Seconds())
	}()
	var body StayHoldRequest
	if err := wire.DecodeBody(c, &body); err != nil {
		status = http.StatusBadRequest
		return err
	}
	res, err := s.HoldStay(c.Request().Context(), stayInput{
		User:  auth.UserID(c),
		Hotel: c.Param("hotel"),
		Pass:  c.Request().Header.Get(HeaderAdmissionPass),
		Key:   c.Request().Header.Get(HeaderIdempotencyKey),
		Req:   body,
	})
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

func (s *staysPlane) postHotel(c echo.Context) error {
	var spec HotelSpec
	if err := wire.DecodeBody(c, &spec); err != nil {
		return err
	}
	sum, err := createHotel(c.Request().Context(), s.db, spec)
	if err != nil {
		return storeError("create hotel", err)
	}
	return c.JSON(http.StatusCreated, sum)
}

type ratesBody struct {
	Rates []RateSpec `json:"rates"`
}

func (s *staysPlane) putRates(c echo.Context) error {
	var body ratesBody
	if err := wire.DecodeBody(c, &body); err != nil {
		return err
	}
	hotel := c.Param("hotel")
	if !validEventID(hotel) {
		return ErrHotelNotFound
	}
	n, err := setRates(c.Request().Context(), s.db, hotel, body.Rates)
	if err != nil {
		return storeError("set rates", err)
	}
	return c.JSON(http.StatusOK, map[string]any{"hotel": hotel, "nightsChanged": n})
}
