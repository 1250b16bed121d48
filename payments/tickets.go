package payments

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/presenced/presenced/payments/ticketcode"
)

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
