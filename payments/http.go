package payments

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/labstack/echo/v4"
	qrcode "github.com/skip2/go-qrcode"

	"github.com/presenced/presenced/internal/auth"
	"github.com/presenced/presenced/internal/validate"
	"github.com/presenced/presenced/payments/ticketcode"
	"github.com/presenced/presenced/web/wire"
)

// The HTTP handlers of payment starts, tickets and provider webhooks, and
// the one table of payments' refusals to their status and error code.

func (a *apiPlane) routes(g *echo.Group, users echo.MiddlewareFunc) {
	g.POST("/v1/reservations/:id/payments", answered(a.postPayment), users)
	g.GET("/v1/tickets", answered(a.listTickets), users)
	g.GET("/v1/tickets/:id/qr", answered(a.ticketQR), users)
}

func (a *apiPlane) postPayment(c echo.Context) error {
	status := http.StatusInternalServerError
	defer func() { a.m.starts.WithLabelValues(fmt.Sprint(status)).Inc() }()
	id, err := uuidParam(c.Param("id"), "not_found", "no such reservation")
	if err != nil {
		status = http.StatusNotFound
		return err
	}
	key, err := idempotencyKey(c.Request().Header.Get(HeaderIdempotencyKey))
	if err != nil {
		status = http.StatusBadRequest
		return err
	}
	if err := emptyBody(c); err != nil {
		status = http.StatusBadRequest
		return err
	}
	body, replayed, err := a.start(c.Request().Context(), auth.UserID(c), id, key)
	if err != nil {
		err = httpError(err)
		var apiErr *wire.Error
		if errors.As(err, &apiErr) {
			status = apiErr.Status
		}
		return err
	}
	status = http.StatusCreated
	if replayed {
		c.Response().Header().Set("Idempotent-Replayed", "true")
	}
	return c.JSONBlob(http.StatusCreated, body)
}

func (a *apiPlane) listTickets(c echo.Context) error {
	rows, err := a.db.Query(c.Request().Context(), `SELECT id::text, event_id, reservation_id::text, label, created_at
		FROM tickets WHERE user_id = $1 ORDER BY created_at, line_id LIMIT 1000`, auth.UserID(c))
	if err != nil {
		return unavailable("read tickets", err)
	}
	list, err := pgx.CollectRows(rows, scanTicket)
	if err != nil {
		return unavailable("read tickets", err)
	}
	if list == nil {
		list = []TicketView{}
	}
	return c.JSON(http.StatusOK, TicketList{Tickets: list})
}

// ticketQR answers the rotating payload of one of the caller's tickets, as
// JSON or (format=png or Accept: image/png) as a QR image.
func (a *apiPlane) ticketQR(c echo.Context) error {
	id, err := uuidParam(c.Param("id"), CodeTicketNotFound, "no such ticket")
	if err != nil {
		return err
	}
	secret, err := ticketSecret(c.Request().Context(), a.db, a.sealer, id, auth.UserID(c))
	if errors.Is(err, pgx.ErrNoRows) {
		return wire.Errorf(http.StatusNotFound, CodeTicketNotFound, "no such ticket")
	}
	if err != nil {
		return unavailable("read ticket", err)
	}
	now := time.Now()
	w := ticketcode.Window(now)
	view := QRView{Ticket: id, Payload: ticketcode.Payload(secret, id, w), Window: w,
		WindowSeconds: ticketcode.WindowSeconds, RefreshAt: time.Unix((w+1)*ticketcode.WindowSeconds, 0).UTC()}
	c.Response().Header().Set("Cache-Control", "no-store")
	format := c.QueryParam("format")
	if format == "png" || (format == "" && strings.Contains(c.Request().Header.Get("Accept"), "image/png")) {
		png, err := qrcode.Encode(view.Payload, qrcode.Medium, 320)
		if err != nil {
			return fmt.Errorf("render qr: %w", err)
		}
		return c.Blob(http.StatusOK, "image/png", png)
	}
	if format != "" && format != "json" {
		return wire.BadRequest("format: json or png")
	}
	return c.JSON(http.StatusOK, view)
}

func (w *webhooks) post(c echo.Context) error {
	name := c.Param("provider")
	p, ok := w.providers[name]
	if !ok {
		return wire.Errorf(http.StatusNotFound, CodeUnknownProvider, "no such payment provider")
	}
	body, err := wire.ReadBody(c, w.cfg.WebhookBodyLimit)
	if err != nil {
		return err
	}
	ev, err := p.ParseWebhook(body, c.Request().Header, time.Now())
	switch {
	case errors.Is(err, ErrBadSignature):
		w.m.webhooks.WithLabelValues(name, "bad_signature").Inc()
		return wire.Errorf(http.StatusUnauthorized, CodeBadSignature, "the signature or its timestamp does not verify")
	case err != nil:
		w.m.webhooks.WithLabelValues(name, "malformed").Inc()
		return wire.BadRequest("not a provider event: %v", err)
	}
	fp := sha256.Sum256(body)
	outcome, err := w.apply(c.Request().Context(), name, ev, fp[:])
	switch {
	case errors.Is(err, errWebhookConflict):
		w.m.webhooks.WithLabelValues(name, "conflict").Inc()
		w.log.Error("webhook event id reused with other content", "provider", name, "event", ev.ID)
		return wire.Errorf(http.StatusConflict, CodeWebhookConflict, "this event id was received with other content")
	case errors.Is(err, errNotReady):
		w.m.webhooks.WithLabelValues(name, "not_ready").Inc()
		e := wire.Errorf(http.StatusServiceUnavailable, CodePaymentNotReady, "the payment is not ready for this event; retry")
		e.RetryAfter = wire.Jitter(5 * time.Second)
		return e
	case err != nil:
		w.m.webhooks.WithLabelValues(name, "error").Inc()
		w.log.Error("webhook", "provider", name, "event", ev.ID, "err", err)
		return wire.Unavailable(5*time.Second, "the webhook could not be applied; retry")
	}
	w.m.webhooks.WithLabelValues(name, outcome).Inc()
	return c.JSON(http.StatusOK, WebhookAnswer{Outcome: outcome})
}

// idempotencyKey validates the header by the one rule every module uses
// (validate.Token).
func idempotencyKey(k string) (string, error) {
	if k == "" {
		return "", wire.Errorf(http.StatusBadRequest, CodeIdempotencyRequired, "the Idempotency-Key header is required")
	}
	if err := validate.Token("Idempotency-Key", k, validate.MaxIdempotencyKeyBytes); err != nil {
		return "", wire.Errorf(http.StatusBadRequest, CodeBadIdempotencyKey, "%v", err)
	}
	return k, nil
}

// uuidParam reads an id path parameter in the canonical UUID form only; an
// id in any other shape names nothing here (404 code).
func uuidParam(s, code, msg string) (string, error) {
	u, err := validate.UUID("id", s)
	if err != nil {
		return "", wire.Errorf(http.StatusNotFound, code, "%s", msg)
	}
	return u, nil
}

// emptyBody accepts no body or an empty JSON object: a start takes nothing
// but the reservation and the key.
func emptyBody(c echo.Context) error {
	raw, err := wire.ReadBody(c, 4096)
	if err != nil {
		return err
	}
	s := strings.TrimSpace(string(raw))
	if s == "" || s == "{}" {
		return nil
	}
	return wire.BadRequest("a payment start takes no body (or {})")
}

// answered is a payments handler whose refusals are answered as httpError
// maps them.
func answered(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error { return httpError(next(c)) }
}

// refusals are the HTTP answers to payments' refusal kinds. A refusal's
// own message, when it has one, is the one sent.
var refusals = []wire.Refusal{
	{Kind: ErrNoReservation, Status: http.StatusNotFound, Code: "not_found"},
	{Kind: ErrKeyReused, Status: http.StatusUnprocessableEntity, Code: CodeIdempotencyKeyReused},
	{Kind: ErrReservationPaid, Status: http.StatusConflict, Code: CodeReservationPaid},
	{Kind: ErrReservationCancelled, Status: http.StatusConflict, Code: CodeReservationCancelled},
	{Kind: ErrReservationExpired, Status: http.StatusConflict, Code: CodeReservationExpired},
	{Kind: ErrFraudDeclined, Status: http.StatusPaymentRequired, Code: CodeFraudDeclined},
	{Kind: ErrProvidersUnavailable, Status: http.StatusServiceUnavailable, Code: CodeProvidersUnavailable},
	{Kind: errProviderRefused, Status: http.StatusBadGateway, Code: CodeProviderRefused,
		Message: "the payment provider refused the payment"},
}

// httpError is the HTTP answer to err: payments' refusals as refusals maps
// them, anything else as it is (a lost store 503, else 500).
func httpError(err error) error { return wire.Refused(err, refusals) }
