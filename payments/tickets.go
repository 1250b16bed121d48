package payments

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/labstack/echo/v4"
	qrcode "github.com/skip2/go-qrcode"

	"github.com/presenced/presenced/internal/auth"
	"github.com/presenced/presenced/payments/ticketcode"
	"github.com/presenced/presenced/web/wire"
)

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

// ticketSecret opens the sealed secret of ticket id owned by user.
func ticketSecret(ctx context.Context, db *pgxpool.Pool, s *ticketcode.Sealer, id, user string) ([]byte, error) {
	var sealed []byte
	var kid string
	if err := db.QueryRow(ctx, `SELECT secret_sealed, key_id FROM tickets WHERE id = $1 AND user_id = $2`, id, user).
		Scan(&sealed, &kid); err != nil {
		return nil, err
	}
	return s.Open(kid, sealed, []byte(id))
}

// exportManifest seals the paid tickets of event into a gate manifest valid
// for ttl.
func (m *Module) exportManifest(ctx context.Context, db *pgxpool.Pool, event string, key []byte, ttl time.Duration) ([]byte, int, error) {
	sealer, err := m.openSealer()
	if err != nil {
		return nil, 0, err
	}
	rows, err := db.Query(ctx, `SELECT t.id::text, t.label, t.secret_sealed, t.key_id FROM tickets t
		JOIN payments p ON p.id = t.payment_id WHERE t.event_id = $1 AND p.status = 'SUCCEEDED' ORDER BY t.id`, event)
	if err != nil {
		return nil, 0, fmt.Errorf("read tickets: %w", err)
	}
	now := time.Now().UTC()
	man := ticketcode.Manifest{Event: event, IssuedAt: now, ExpiresAt: now.Add(ttl), Tickets: []ticketcode.ManifestTicket{}}
	for rows.Next() {
		var t ticketcode.ManifestTicket
		var sealed []byte
		var kid string
		if err := rows.Scan(&t.ID, &t.Label, &sealed, &kid); err != nil {
			rows.Close()
			return nil, 0, fmt.Errorf("read tickets: %w", err)
		}
		if t.Secret, err = sealer.Open(kid, sealed, []byte(t.ID)); err != nil {
			rows.Close()
			return nil, 0, fmt.Errorf("ticket %s: %w", t.ID, err)
		}
		man.Tickets = append(man.Tickets, t)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, 0, fmt.Errorf("read tickets: %w", err)
	}
	out, err := ticketcode.SealManifest(man, key)
	return out, len(man.Tickets), err
}
