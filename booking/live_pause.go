package booking

import (
	"bytes"
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/redis/go-redis/v9"

	"github.com/presenced/presenced/internal/hub"
	"github.com/presenced/presenced/internal/refusal"
	"github.com/presenced/presenced/store"
	"github.com/presenced/presenced/web/wire"
)

// Pausing an event's live pushes is rung 2 of the load-shedding ladder
// (docs/operations.md): every committed change makes each live viewer
// refetch a section, so during a stampede the pushes multiply the read
// load. Paused, the relay still drops the cached map but publishes nothing,
// and viewers are told to poll the seat map instead, at an interval the
// operator picks; resumed, they get a reset and follow invalidations again.
// The switch lives in Redis under the event's hash tag, so every browse
// process and the relay see it at once, with no restart.

// Poll intervals an operator may ask viewers for.
const (
	defaultLivePollMs = 5000
	minLivePollMs     = 1000
	maxLivePollMs     = 600000
)

// pausedMessage tells a viewer to stop waiting for pushes and poll.
type pausedMessage struct {
	Type   string `json:"type"`
	PollMs int    `json:"pollMs"`
}

func (s *seatMap) getLivePause(c echo.Context) error {
	ctx := c.Request().Context()
	l, err := s.layoutOf(ctx, c.Param("event"))
	if err != nil {
		return err
	}
	pollMs, paused, err := s.livePaused(ctx, l.event)
	if err != nil {
		return refusal.Busy(time.Second, "the live switch cannot be read right now")
	}
	if !paused {
		pollMs = 0
	}
	return c.JSON(http.StatusOK, LivePause{Paused: &paused, PollMs: pollMs})
}

func (s *seatMap) putLivePause(c echo.Context, h *hub.Hub) error {
	ctx := c.Request().Context()
	l, err := s.layoutOf(ctx, c.Param("event"))
	if err != nil {
		return err
	}
	var req LivePause
	if err := wire.DecodeBody(c, &req); err != nil {
		return err
	}
	switch {
	case req.Paused == nil:
		return refusal.Invalid(`"paused" (true or false) is required`)
	case req.PollMs != 0 && (req.PollMs < minLivePollMs || req.PollMs > maxLivePollMs):
		return refusal.Invalid(`"pollMs" must be between %d and %d`, minLivePollMs, maxLivePollMs)
	case !*req.Paused && req.PollMs != 0:
		return refusal.Invalid(`"pollMs" applies only when pausing`)
	}
	value, msg := "", resetMessage
	if *req.Paused {
		if req.PollMs == 0 {
			req.PollMs = defaultLivePollMs
		}
		value = strconv.Itoa(req.PollMs)
		msg, _ = json.Marshal(pausedMessage{Type: "paused", PollMs: req.PollMs})
	}
	args := []any{value, h.PublishCommand(), msg}
	for _, sec := range l.sections {
		args = append(args, s.keys.liveTopic(l.event, sec.ID))
	}
	if err := livePauseScript.Run(ctx, s.rdb, []string{s.keys.livePause(l.event)}, args...).Err(); err != nil {
		s.log.Warn("live pause switch", "event", l.event, "paused", *req.Paused, "err", err)
		return refusal.Busy(time.Second, "the live switch cannot be set right now; retry")
	}
	s.log.Info("live seat-map pushes switched", "event", l.event, "paused", *req.Paused, "pollMs", req.PollMs)
	return c.JSON(http.StatusOK, req)
}

// livePaused reads the event's switch: the poll interval when paused.
func (s *seatMap) livePaused(ctx context.Context, event string) (int, bool, error) {
	v, err := s.rdb.Get(ctx, s.keys.livePause(event)).Int()
	switch {
	case errors.Is(err, redis.Nil):
		return 0, false, nil
	case err != nil:
		return 0, false, fmt.Errorf("read live pause of %s: %w", event, err)
	}
	return v, true, nil
}

// pausedNotice is the message a viewer connecting to a paused event gets
// after its reset, nil when pushes are on. If the switch cannot be read the
// viewer gets pushes as usual: a shedding switch fails open.
func (s *seatMap) pausedNotice(ctx context.Context, event string) []byte {
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	pollMs, paused, err := s.livePaused(ctx, event)
	if err != nil || !paused {
		return nil
	}
	msg, _ := json.Marshal(pausedMessage{Type: "paused", PollMs: pollMs})
	return msg
}

// liveEventName is the SSE event name of a published message: its type.
func liveEventName(payload []byte) string {
	switch {
	case bytes.HasPrefix(payload, []byte(`{"type":"paused"`)):
		return "paused"
	case bytes.Equal(payload, resetMessage):
		return "reset"
	}
	return "invalidate"
}

//go:embed lua/live_pause.lua
var livePauseLua string

var livePauseScript = store.NewScript("booking_live_pause", livePauseLua)
