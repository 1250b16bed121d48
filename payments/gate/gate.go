// Package gate is the venue entry service (`presenced gate`): a small HTTP
// service over a SQLite ledger in WAL mode, loaded from an encrypted,
// expiring manifest of paid tickets. A scan is one INSERT into the entries
// table keyed by ticket, so a replay at a second gate is refused by the
// uniqueness constraint, not by application logic.
//
// The CAP choice: consistency over availability. Every gate of a venue
// shares one ledger file on the venue's LAN; a gate that cannot write it
// refuses entry (503) rather than admit a ticket it cannot record. Offline
// scanners would stay available and admit a copied code twice before they
// sync; that is a business decision this service does not make for you.
package gate

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"

	"github.com/presenced/presenced/internal/refusal"
	"github.com/presenced/presenced/payments/ticketcode"
)

// Gate is one gate process's handle on the shared ledger.
type Gate struct {
	db   *sql.DB
	name string
	now  func() time.Time
	log  *slog.Logger
}

// ScanRequest is the body of POST /v1/gate/scan.
type ScanRequest struct {
	Payload string `json:"payload"`
}

// ScanAnswer is a 200: the holder may enter.
type ScanAnswer struct {
	Result string `json:"result"`
	Ticket string `json:"ticket"`
	Label  string `json:"label"`
	Gate   string `json:"gate"`
}

// Error codes of a scan.
const (
	CodeAlreadyUsed = "already_used"
	CodeInvalidCode = "invalid_code"
)

const schema = `
CREATE TABLE IF NOT EXISTS tickets (
	id     TEXT PRIMARY KEY,
	event  TEXT NOT NULL,
	label  TEXT NOT NULL,
	secret BLOB NOT NULL
) STRICT;
CREATE TABLE IF NOT EXISTS entries (
	ticket_id   TEXT PRIMARY KEY REFERENCES tickets (id),
	gate        TEXT NOT NULL,
	admitted_at TEXT NOT NULL
) STRICT;
CREATE TABLE IF NOT EXISTS manifests (
	event      TEXT NOT NULL,
	issued_at  TEXT NOT NULL,
	expires_at TEXT NOT NULL,
	tickets    INTEGER NOT NULL,
	loaded_at  TEXT NOT NULL
) STRICT;`

// Open opens (creating) the ledger at path in WAL mode. busy waits how long
// a write queues behind another gate's before the scan fails closed.
func Open(path, name string, busy time.Duration, log *slog.Logger) (*Gate, error) {
	if name == "" || len(name) > 64 {
		return nil, errors.New("gate: a name of 1-64 characters is required")
	}
	dsn := fmt.Sprintf("file:%s?_pragma=journal_mode(WAL)&_pragma=busy_timeout(%d)&_pragma=foreign_keys(1)&_pragma=synchronous(FULL)",
		path, busy.Milliseconds())
	db, err := sql.Open("sqlite", dsn)
	if err != nil {
		return nil, fmt.Errorf("gate: open ledger: %w", err)
	}
	db.SetMaxOpenConns(4)
	ctx, cancel := context.WithTimeout(context.Background(), busy+5*time.Second)
	defer cancel()
	var mode string
	if err := db.QueryRowContext(ctx, `PRAGMA journal_mode`).Scan(&mode); err != nil || mode != "wal" {
		db.Close()
		return nil, fmt.Errorf("gate: ledger %s is not in WAL mode (%q): %v", path, mode, err)
	}
	if _, err := db.ExecContext(ctx, schema); err != nil {
		db.Close()
		return nil, fmt.Errorf("gate: create ledger: %w", err)
	}
	return &Gate{db: db, name: name, now: time.Now, log: log}, nil
}

// Close closes the ledger.
func (g *Gate) Close() error { return g.db.Close() }

// Load adds a manifest's tickets to the ledger (again loading one is
// harmless) and returns how many it holds for the event.
func (g *Gate) Load(ctx context.Context, m ticketcode.Manifest) (int, error) {
	tx, err := g.db.BeginTx(ctx, nil)
	if err != nil {
		return 0, fmt.Errorf("gate: load manifest: %w", err)
	}
	defer func() { _ = tx.Rollback() }()
	for _, t := range m.Tickets {
		if _, err := tx.ExecContext(ctx, `INSERT INTO tickets (id, event, label, secret) VALUES (?, ?, ?, ?)
			ON CONFLICT (id) DO NOTHING`, t.ID, m.Event, t.Label, t.Secret); err != nil {
			return 0, fmt.Errorf("gate: load ticket: %w", err)
		}
	}
	if _, err := tx.ExecContext(ctx, `INSERT INTO manifests VALUES (?, ?, ?, ?, ?)`, m.Event,
		m.IssuedAt.UTC().Format(time.RFC3339), m.ExpiresAt.UTC().Format(time.RFC3339), len(m.Tickets),
		g.now().UTC().Format(time.RFC3339)); err != nil {
		return 0, fmt.Errorf("gate: record manifest: %w", err)
	}
	if err := tx.Commit(); err != nil {
		return 0, fmt.Errorf("gate: load manifest: %w", err)
	}
	var n int
	err = g.db.QueryRowContext(ctx, `SELECT count(*) FROM tickets WHERE event = ?`, m.Event).Scan(&n)
	return n, err
}

// Scan admits the holder of payload once. It refuses with ErrAlreadyUsed,
// ErrInvalidCode (invalid or expired code) and ErrLedgerUnavailable (the
// ledger cannot be written).
func (g *Gate) Scan(ctx context.Context, payload string) (ScanAnswer, error) {
	id, window, sig, err := ticketcode.ParsePayload(strings.TrimSpace(payload))
	if err != nil {
		return ScanAnswer{}, refusal.New(ErrInvalidCode, "not a ticket code")
	}
	var secret []byte
	var label string
	err = g.db.QueryRowContext(ctx, `SELECT secret, label FROM tickets WHERE id = ?`, id).Scan(&secret, &label)
	if errors.Is(err, sql.ErrNoRows) {
		return ScanAnswer{}, refusal.New(ErrInvalidCode, "not a ticket of this venue")
	}
	if err != nil {
		return ScanAnswer{}, g.closed(err)
	}
	if err := ticketcode.Verify(secret, id, window, sig, g.now()); err != nil {
		return ScanAnswer{}, refusal.New(ErrInvalidCode, "invalid or expired code: %v", err)
	}
	// The arbiter: the entries primary key admits each ticket once,
	// whichever gate and process writes first.
	_, err = g.db.ExecContext(ctx, `INSERT INTO entries (ticket_id, gate, admitted_at) VALUES (?, ?, ?)`,
		id, g.name, g.now().UTC().Format(time.RFC3339Nano))
	var se *sqlite.Error
	if errors.As(err, &se) && (se.Code() == sqlite3.SQLITE_CONSTRAINT_PRIMARYKEY || se.Code() == sqlite3.SQLITE_CONSTRAINT_UNIQUE) {
		return ScanAnswer{}, ErrAlreadyUsed
	}
	if err != nil {
		return ScanAnswer{}, g.closed(err)
	}
	return ScanAnswer{Result: "admitted", Ticket: id, Label: label, Gate: g.name}, nil
}

// closed fails a scan closed: nobody enters on a ledger we cannot write.
func (g *Gate) closed(err error) error {
	g.log.Error("gate ledger unavailable: refusing entry", "err", err)
	return &refusal.Error{Kind: ErrLedgerUnavailable, Msg: ErrLedgerUnavailable.Error(), RetryAfter: time.Second}
}
