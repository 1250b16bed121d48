package presence

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/presenced/presenced/internal/stdwebhook"
)

// Webhooks: every status change is queued in process (never waiting on the
// hot path), written to its shard's changes stream, and delivered by the
// workers in signed batches with retries.

// changeWriter moves status changes from the hot path to the changes
// streams. When its in-process queue is full, changes are dropped and
// counted rather than slowing a status change down.
type changeWriter struct {
	mod     *Module
	enabled bool
	ch      chan Status
}

func newChangeWriter(m *Module) *changeWriter {
	w := &changeWriter{mod: m, enabled: m.cfg.Webhook.URL != ""}
	if w.enabled {
		w.ch = make(chan Status, 10000)
	}
	return w
}

func (w *changeWriter) enqueue(st Status) {
	if !w.enabled {
		return
	}
	select {
	case w.ch <- st:
	default:
		w.mod.m.webhookDropped.Inc()
	}
}

func (w *changeWriter) run(ctx context.Context) error {
	if !w.enabled {
		<-ctx.Done()
		return nil
	}
	batch := make([]Status, 0, 256)
	for {
		select {
		case <-ctx.Done():
			// Write what is queued, briefly, so a clean stop loses nothing.
			drain, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer cancel()
			for {
				select {
				case st := <-w.ch:
					batch = append(batch, st)
				default:
					w.write(drain, batch)
					return nil
				}
			}
		case st := <-w.ch:
			batch = append(batch[:0], st)
		}
	more:
		for len(batch) < cap(batch) {
			select {
			case st := <-w.ch:
				batch = append(batch, st)
			default:
				break more
			}
		}
		w.write(ctx, batch)
	}
}

func (w *changeWriter) write(ctx context.Context, batch []Status) {
	if len(batch) == 0 {
		return
	}
	m := w.mod
	_, err := m.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for _, st := range batch {
			b, _ := json.Marshal(st.public())
			p.XAdd(ctx, &redis.XAddArgs{
				Stream: m.keys.shard(m.keys.shardOf(st.User)).changes, MaxLen: m.cfg.Webhook.MaxLen, Approx: true,
				Values: []any{"c", b},
			})
		}
		return nil
	})
	if err != nil {
		m.m.webhookDropped.Add(float64(len(batch)))
		m.log.Warn("presence: queue webhook changes", "err", err)
	}
}

// webhookSender delivers the changes streams as batches signed with the
// Standard Webhooks scheme.
type webhookSender struct {
	mod    *Module
	c      *consumer
	client *http.Client
	signer *stdwebhook.Signer
}

func newWebhookSender(m *Module) (*webhookSender, error) {
	signer, err := stdwebhook.NewSigner(m.cfg.Webhook.Secret)
	if err != nil {
		return nil, fmt.Errorf("presence.webhook.secret: %w", err)
	}
	c := newConsumer(m, "changes", groupWebhooks, func(n int) string { return m.keys.shard(n).changes })
	// Changes gather for a batch window between reads.
	c.poll, c.gather = m.cfg.Webhook.BatchWindow, true
	c.count = int64(m.cfg.Webhook.BatchSize)
	return &webhookSender{mod: m, c: c, client: &http.Client{Timeout: m.cfg.Webhook.Timeout}, signer: signer}, nil
}

func (s *webhookSender) run(ctx context.Context) error {
	return s.c.loop(ctx, s.deliver)
}

// deliver posts one shard's batch (up to the batch size, gathered for at
// most the batch window), retrying with exponential backoff and jitter;
// after max_attempts the entries go to the dead-letter stream.
func (s *webhookSender) deliver(ctx context.Context, c *consumer, shard int, msgs []redis.XMessage) []string {
	cfg := s.mod.cfg.Webhook
	var ids []string
	var kept []redis.XMessage
	// Each entry is a status change (c) or an audit record (a).
	items := make([]WebhookBody, 0, len(msgs))
	for _, msg := range msgs {
		var item WebhookBody
		if a, ok := msg.Values["a"]; ok {
			var r AuditRecord
			if err := json.Unmarshal([]byte(str(a)), &r); err == nil && r.User != "" {
				item.Audit = []AuditRecord{r}
			}
		} else {
			var st Status
			if err := json.Unmarshal([]byte(str(msg.Values["c"])), &st); err == nil && st.User != "" {
				item.Events = []Status{st}
			}
		}
		if item.Audit == nil && item.Events == nil {
			if err := c.deadLetter(ctx, shard, msg, "malformed change"); err != nil {
				s.mod.log.Warn("presence: dead-letter change", "err", err)
			}
			continue
		}
		items = append(items, item)
		ids = append(ids, msg.ID)
		kept = append(kept, msg)
	}
	for start := 0; start < len(items); start += cfg.BatchSize {
		end := min(start+cfg.BatchSize, len(items))
		// The id names the batch by its entries: a retry, or another
		// worker redelivering the same pending entries, sends the same id.
		id := "presence-" + strconv.Itoa(shard) + "-" + ids[start] + "-" + ids[end-1]
		body := WebhookBody{Events: make([]Status, 0, end-start)}
		for _, it := range items[start:end] {
			body.Events = append(body.Events, it.Events...)
			body.Audit = append(body.Audit, it.Audit...)
		}
		if !s.post(ctx, id, body) {
			for _, msg := range kept[start:end] {
				if err := c.deadLetter(ctx, shard, msg, "webhook undeliverable"); err != nil {
					s.mod.log.Warn("presence: dead-letter change", "err", err)
				}
			}
		}
	}
	return ids
}

func (s *webhookSender) post(ctx context.Context, id string, batch WebhookBody) bool {
	cfg := s.mod.cfg.Webhook
	body, _ := json.Marshal(batch)
	backoff := cfg.Backoff
	for attempt := 1; attempt <= cfg.MaxAttempts; attempt++ {
		err := s.send(ctx, id, body)
		if err == nil {
			s.mod.m.webhookBatches.WithLabelValues("delivered").Inc()
			return true
		}
		if ctx.Err() != nil {
			return true // stopping: the entries stay pending for another worker
		}
		s.mod.log.Warn("presence: webhook delivery failed", "attempt", attempt, "err", err)
		if attempt == cfg.MaxAttempts {
			break
		}
		s.mod.m.webhookBatches.WithLabelValues("retry").Inc()
		sleep(ctx, backoff/2+time.Duration(rand.Int64N(int64(backoff))))
		backoff = min(backoff*2, cfg.MaxBackoff)
	}
	s.mod.m.webhookBatches.WithLabelValues("dead_letter").Inc()
	return false
}

func (s *webhookSender) send(ctx context.Context, id string, body []byte) error {
	cfg := s.mod.cfg.Webhook
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, cfg.URL, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	if err := s.signer.Sign(req, id, body, time.Now()); err != nil {
		return err
	}
	resp, err := s.client.Do(req)
	if err != nil {
		return err
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("status %d", resp.StatusCode)
	}
	return nil
}
