package payments_test

import (
	"bytes"
	"context"
	"encoding/json"
	"net"
	"net/http"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/spf13/cobra"
	"github.com/stretchr/testify/require"

	"github.com/presenced/presenced/cli"
	"github.com/presenced/presenced/internal/testenv"
	"github.com/presenced/presenced/payments"
	"github.com/presenced/presenced/payments/gate"
)

// presenced runs the binary's commands in process, on the sale's database
// and data folder (so its development keys).
func (s *sale) presenced(ctx context.Context, args ...string) (string, error) {
	root := &cobra.Command{Use: "presenced", SilenceUsage: true, SilenceErrors: true}
	root.AddCommand(cli.CheckCmd(), cli.ManifestCmd(), cli.GateCmd())
	var out bytes.Buffer
	root.SetOut(&out)
	root.SetErr(&out)
	// Each command takes the configuration flags it reads; the gate reads
	// only the data folder (its keys), never the database.
	args = append(args, "--data-dir", s.cfg.DataDir)
	if args[0] != "gate" {
		args = append(args, "--postgres-url", s.cfg.Postgres.URL)
	}
	root.SetArgs(args)
	err := root.ExecuteContext(ctx)
	return out.String(), err
}

// From paid tickets to the door: `presenced check` passes, the manifest is
// exported, a `presenced gate` loads it and admits a fresh QR code once;
// and `presenced check` fails once a monitor reads more than zero.
func TestManifestGateAndCheck(t *testing.T) {
	t.Parallel()
	s := startSale(t, 5, nil)
	b, res, v, _ := s.pending(2)
	s.confirm(v)
	s.waitFulfilled(res, 2)
	ctx := context.Background()

	out, err := s.presenced(ctx, "check")
	require.NoError(t, err, out)
	require.Contains(t, out, "double_owned_seats")
	require.Contains(t, out, "paid_without_tickets")

	file := filepath.Join(t.TempDir(), "m.bin")
	out, err = s.presenced(ctx, "manifest", "export", "--event", s.event, "--out", file)
	require.NoError(t, err, out)
	require.Contains(t, out, "2 tickets")

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close())
	gctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		_, err := s.presenced(gctx, "gate", "--manifest", file, "--db", filepath.Join(t.TempDir(), "g.sqlite"), "--listen", addr)
		done <- err
	}()
	t.Cleanup(func() { stop(); <-done })
	testenv.Eventually(t, 10*time.Second, func() bool {
		resp, err := http.Get("http://" + addr + "/healthz")
		if err == nil {
			resp.Body.Close()
		}
		return err == nil
	}, "gate up")

	status, body := s.do(http.MethodGet, "/v1/tickets", map[string]string{"Authorization": "Bearer " + b.token}, nil)
	require.Equal(t, 200, status)
	var list payments.TicketList
	require.NoError(t, json.Unmarshal([]byte(body), &list))
	status, body = s.do(http.MethodGet, "/v1/tickets/"+list.Tickets[1].ID+"/qr", map[string]string{"Authorization": "Bearer " + b.token}, nil)
	require.Equal(t, 200, status)
	var qr payments.QRView
	require.NoError(t, json.Unmarshal([]byte(body), &qr))
	scan := func() int {
		raw, _ := json.Marshal(gate.ScanRequest{Payload: qr.Payload})
		resp, err := http.Post("http://"+addr+"/v1/gate/scan", "application/json", bytes.NewReader(raw))
		require.NoError(t, err)
		resp.Body.Close()
		return resp.StatusCode
	}
	require.Equal(t, 200, scan())
	require.Equal(t, 409, scan())

	_, err = s.db.Exec(ctx, `INSERT INTO payments (id, reservation_id, user_id, idempotency_key, provider, amount, currency, status, fraud_verdict, created_at)
		VALUES ($1, $2, 'u', 'stuck', 'sandbox', 1, 'EUR', 'FAILED', 'accept', now() - interval '3 minutes')`, uuid.NewString(), res)
	require.NoError(t, err)
	_, err = s.db.Exec(ctx, `UPDATE payments SET status = 'INITIALIZING' WHERE idempotency_key = 'stuck'`)
	require.Error(t, err, "a second live payment for a reservation is refused by the schema")
	_, b2 := s.hold(1)
	_, err = s.db.Exec(ctx, `INSERT INTO payments (id, reservation_id, user_id, idempotency_key, provider, amount, currency, status, fraud_verdict, created_at, next_attempt_at)
		VALUES ($1, $2, 'u', 'stuck2', 'sandbox', 1, 'EUR', 'INITIALIZING', 'accept', now() - interval '3 minutes', 'infinity')`, uuid.NewString(), b2)
	require.NoError(t, err)
	out, err = s.presenced(ctx, "check")
	require.Error(t, err)
	require.Contains(t, err.Error(), "1 correctness monitor(s) violated")
	require.Regexp(t, `initializing_stuck +1 +VIOLATED`, out)
}
