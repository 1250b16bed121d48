package presence

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"
)

// Audit: every change a person makes (a manual status, invisible, who may
// see the user) is queued in process, never waiting on the change, and
// written to PostgreSQL (presence_audit) in batches by a background
// writer (records gathered for up to auditGather, then one statement per
// batch), each with an outbox event (kind presence.audit) committed with
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
		gather := time.NewTimer(auditGather)
	more:
		for len(batch) < cap(batch) {
			select {
			case r := <-w.ch:
				batch = append(batch, r)
			case <-gather.C:
				break more
			}
		}
		gather.Stop()
		w.write(ctx, batch)
	}
}

// insertAudit writes a batch of records and their outbox events in one
// statement (one round trip, one commit): at a thousand manual changes a
// second, a transaction of two batches per record cost the shared core
// more than the changes themselves. The events' payloads are the records
// as AuditRecord encodes them.
const insertAudit = `
WITH rec AS (
	INSERT INTO presence_audit (user_id, actor, device, kind, old_value, new_value, request_id, at)
	SELECT u, a, d, k, o, n, r, t
	FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::text[], $7::text[], $8::timestamptz[])
	     WITH ORDINALITY AS x(u, a, d, k, o, n, r, t, i)
	ORDER BY i
	RETURNING id, user_id, actor, device, kind, old_value, new_value, request_id, at),
body AS (
	SELECT id, user_id, jsonb_strip_nulls(jsonb_build_object(
	         'id', id, 'user', user_id, 'actor', actor, 'device', nullif(device, ''), 'kind', kind,
	         'old', old_value, 'new', new_value, 'at', (extract(epoch FROM at) * 1000)::bigint,
	         'requestId', nullif(request_id, ''))) AS payload
	FROM rec),
events AS (
	INSERT INTO outbox (kind, aggregate_id, payload)
	SELECT $9, user_id, payload FROM body ORDER BY id RETURNING 1)
SELECT user_id, payload::text FROM body ORDER BY id`

// auditGather is how long the writer waits for more records after the
// first of a batch: records are not read at once, and fewer, larger
// batches cost PostgreSQL much less.
const auditGather = 100 * time.Millisecond

func (w *auditWriter) write(ctx context.Context, batch []AuditRecord) {
	if len(batch) == 0 {
		return
	}
	m := w.mod
	cols := make([][]string, 7)
	at := make([]time.Time, len(batch))
	for i, r := range batch {
		for c, v := range []string{r.User, r.Actor, r.Device, r.Kind, r.Old, r.New, r.RequestID} {
			cols[c] = append(cols[c], v)
		}
		at[i] = time.UnixMilli(r.At)
	}
	rows, err := w.pool.Query(ctx, insertAudit, cols[0], cols[1], cols[2], cols[3], cols[4], cols[5], cols[6], at, kindAudit)
	type written struct{ user, payload string }
	var out []written
	if err == nil {
		out, err = pgx.CollectRows(rows, func(row pgx.CollectableRow) (written, error) {
			var w written
			return w, row.Scan(&w.user, &w.payload)
		})
	}
	if err != nil {
		m.m.auditDropped.Add(float64(len(batch)))
		m.log.Warn("presence: write audit records", "err", err, "records", len(batch))
		return
	}
	if !m.changes.enabled {
		return
	}
	// The webhook gets each record as written (with its id).
	_, err = m.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for _, w := range out {
			p.XAdd(ctx, &redis.XAddArgs{
				Stream: m.keys.shard(m.keys.shardOf(w.user)).changes, MaxLen: m.cfg.Webhook.MaxLen, Approx: true,
				Values: []any{"a", w.payload},
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
