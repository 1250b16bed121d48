package presence

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"

	"github.com/presenced/presenced/internal/outbox"
)

// Audit: every change a person makes (a manual status, invisible, who may
// see the user) is queued in process, never waiting on the change, and
// written to PostgreSQL (presence_audit) in batches by a background
// writer, each with an outbox event (kind presence.audit) committed with
// it for the consumers of the event stream, then queued for the webhook
// with the status changes. Automatic statuses are never recorded.

// Audit kinds and actors.
const (
	auditStatus     = "status"
	auditInvisible  = "invisible"
	auditVisibility = "visibility"
	actorAdmin      = "admin:api-key"
	// kindAudit is the outbox event of an audit record.
	kindAudit = "presence.audit"
)

func userActor(user string) string { return "user:" + user }

type auditWriter struct {
	mod  *Module
	ch   chan AuditRecord
	pool *pgxpool.Pool
}

func newAuditWriter(m *Module) *auditWriter {
	return &auditWriter{mod: m, ch: make(chan AuditRecord, 10000)}
}

// add queues a record; a full queue drops it, counted, rather than slow
// the change down.
func (w *auditWriter) add(r AuditRecord) {
	if r.At == 0 {
		r.At = time.Now().UnixMilli()
	}
	select {
	case w.ch <- r:
	default:
		w.mod.m.auditDropped.Inc()
	}
}

// auditStep records what a user's own step changed of their manual
// status and of invisible.
func (w *auditWriter) auditStep(r AuditRecord, res stepResult, manual, invisible string) {
	if invisible != "" && res.WasInvisible != res.Own.Invisible {
		a := r
		a.Kind, a.Old, a.New = auditInvisible, strconv.FormatBool(res.WasInvisible), strconv.FormatBool(res.Own.Invisible)
		w.add(a)
	}
	if manual != "" && res.OwnBefore != res.Own.Status {
		a := r
		a.Kind, a.Old, a.New = auditStatus, res.OwnBefore, res.Own.Status
		w.add(a)
	}
}

func visibilityString(v visibility) string {
	v = v.orEveryone()
	return "status=" + v.Status + ",lastActiveAt=" + v.LastActive
}

// auditPurgeEvery is how often a writer deletes records past retention.
const auditPurgeEvery = time.Hour

func (w *auditWriter) run(ctx context.Context) error {
	purge := time.NewTicker(auditPurgeEvery)
	defer purge.Stop()
	w.purge(ctx)
	batch := make([]AuditRecord, 0, 256)
	for {
		select {
		case <-ctx.Done():
			// Write what is queued, briefly, so a clean stop loses nothing.
			drain, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer cancel()
			batch = batch[:0]
			for {
				select {
				case r := <-w.ch:
					batch = append(batch, r)
				default:
					w.write(drain, batch)
					return nil
				}
			}
		case <-purge.C:
			w.purge(ctx)
			continue
		case r := <-w.ch:
			batch = append(batch[:0], r)
		}
	more:
		for len(batch) < cap(batch) {
			select {
			case r := <-w.ch:
				batch = append(batch, r)
			default:
				break more
			}
		}
		w.write(ctx, batch)
	}
}

const insertAudit = `INSERT INTO presence_audit (user_id, actor, device, kind, old_value, new_value, request_id, at)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8) RETURNING id`

func (w *auditWriter) write(ctx context.Context, batch []AuditRecord) {
	if len(batch) == 0 {
		return
	}
	m := w.mod
	err := pgx.BeginFunc(ctx, w.pool, func(tx pgx.Tx) error {
		b := &pgx.Batch{}
		for i := range batch {
			r := &batch[i]
			b.Queue(insertAudit, r.User, r.Actor, r.Device, r.Kind, r.Old, r.New, r.RequestID, time.UnixMilli(r.At)).
				QueryRow(func(row pgx.Row) error { return row.Scan(&r.ID) })
		}
		if err := tx.SendBatch(ctx, b).Close(); err != nil {
			return err
		}
		// The ids are known now: the events carry them.
		events := &pgx.Batch{}
		for _, r := range batch {
			if err := outbox.Queue(events, kindAudit, r.User, r); err != nil {
				return err
			}
		}
		return tx.SendBatch(ctx, events).Close()
	})
	if err != nil {
		m.m.auditDropped.Add(float64(len(batch)))
		m.log.Warn("presence: write audit records", "err", err, "records", len(batch))
		return
	}
	if !m.changes.enabled {
		return
	}
	_, err = m.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for _, r := range batch {
			b, _ := json.Marshal(r)
			p.XAdd(ctx, &redis.XAddArgs{
				Stream: m.keys.shard(m.keys.shardOf(r.User)).changes, MaxLen: m.cfg.Webhook.MaxLen, Approx: true,
				Values: []any{"a", b},
			})
		}
		return nil
	})
	if err != nil {
		m.m.webhookDropped.Add(float64(len(batch)))
		m.log.Warn("presence: queue audit webhooks", "err", err)
	}
}

// purge deletes records older than presence.audit_retention, a slice at
// a time so no one statement holds many rows.
func (w *auditWriter) purge(ctx context.Context) {
	before := time.Now().Add(-w.mod.cfg.AuditRetention)
	for ctx.Err() == nil {
		tag, err := w.pool.Exec(ctx, `DELETE FROM presence_audit WHERE id IN
			(SELECT id FROM presence_audit WHERE at < $1 LIMIT 10000)`, before)
		if err != nil {
			w.mod.log.Warn("presence: purge audit records", "err", err)
			return
		}
		if tag.RowsAffected() < 10000 {
			return
		}
	}
}

// page reads up to limit records of user older than id before (0: newest).
func (w *auditWriter) page(ctx context.Context, user string, before int64, limit int) ([]AuditRecord, error) {
	if before <= 0 {
		before = 1<<63 - 1
	}
	rows, err := w.pool.Query(ctx, `SELECT id, user_id, actor, device, kind, old_value, new_value, request_id, at
		FROM presence_audit WHERE user_id = $1 AND id < $2 ORDER BY id DESC LIMIT $3`, user, before, limit)
	if err != nil {
		return nil, fmt.Errorf("presence: read audit: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (AuditRecord, error) {
		var r AuditRecord
		var at time.Time
		err := row.Scan(&r.ID, &r.User, &r.Actor, &r.Device, &r.Kind, &r.Old, &r.New, &r.RequestID, &at)
		r.At = at.UnixMilli()
		return r, err
	})
	if err != nil {
		return nil, fmt.Errorf("presence: read audit: %w", err)
	}
	if out == nil {
		out = []AuditRecord{}
	}
	return out, nil
}
