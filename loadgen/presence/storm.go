package presence

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"strings"
	"time"

	"github.com/presenced/presenced/internal/auth"
	"github.com/presenced/presenced/presence"
)

// storm kills a share of the connections without a close frame, then
// measures how long their users stay online: as seen by their followers
// here, and by a final query of the server after the storm window.
func (run *loadRun) storm(ctx context.Context, gw string) error {
	l := run.l
	n := int(float64(len(run.conns)) * l.stormPercent / 100)
	perm := rand.Perm(len(run.conns))
	victims := make([]string, 0, n)
	at := time.Now()
	for _, i := range perm[:n] {
		c := run.conns[i]
		c.dead.Store(true)
		run.killed.Store(c.user, at)
		victims = append(victims, c.user)
		_ = c.ws.UnderlyingConn().Close()
	}
	sleepCtx(ctx, l.stormWindow)
	run.offMu.Lock()
	seen := len(run.offSeen)
	h := run.offHist
	run.offMu.Unlock()
	run.r.AddFigure("storm", "killed %d of %d connections without a close frame", n, len(run.conns))
	if seen > 0 {
		run.r.AddFigure("time to offline (seen by followers)", "p50 %s p99 %s max %s over %d users",
			h.Quantile(0.5).Round(time.Millisecond), h.Quantile(0.99).Round(time.Millisecond), h.Max().Round(time.Millisecond), seen)
	}
	stillOnline, err := run.countOnline(ctx, gw, victims)
	if err != nil {
		return err
	}
	run.r.AddFigure(fmt.Sprintf("false-online after %s", l.stormWindow), "%.2f %% (%d of %d killed sessions still shown online)",
		100*float64(stillOnline)/float64(max(n, 1)), stillOnline, n)
	return nil
}

func (run *loadRun) countOnline(ctx context.Context, gw string, users []string) (int, error) {
	online := 0
	for start := 0; start < len(users); start += 1000 {
		batch := users[start:min(start+1000, len(users))]
		body, _ := json.Marshal(map[string]any{"users": batch})
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, strings.TrimRight(gw, "/")+"/v1/presence/query", bytes.NewReader(body))
		if err != nil {
			return 0, err
		}
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set(auth.APIKeyHeader, run.l.secrets.APIKey)
		resp, err := run.r.Client.Do(req)
		if err != nil {
			return 0, err
		}
		var out presence.UpdatedPayload
		err = json.NewDecoder(resp.Body).Decode(&out)
		resp.Body.Close()
		if err != nil || resp.StatusCode != http.StatusOK {
			return 0, fmt.Errorf("query: status %d: %v", resp.StatusCode, err)
		}
		for _, st := range out.Users {
			if st.Status != presence.StatusOffline {
				online++
			}
		}
	}
	return online, nil
}
