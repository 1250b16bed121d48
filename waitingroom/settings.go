package waitingroom

import (
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"time"

	"github.com/presenced/presenced/web/wire"
)

// Limits of the settings an operator may choose.
const (
	maxCapacity        = 1_000_000
	maxBatch           = 10_000
	minLeaseSeconds    = 10
	maxLeaseSeconds    = 3600
	minHeartbeatSecond = 10
	maxHeartbeatSecond = 3600
)

// validate checks the settings as a whole.
func (s Settings) validate() error {
	var errs []error
	if s.Capacity < 0 || s.Capacity > maxCapacity {
		errs = append(errs, fmt.Errorf("capacity must be within 0..%d", maxCapacity))
	}
	if s.Batch < 1 || s.Batch > maxBatch {
		errs = append(errs, fmt.Errorf("batch must be within 1..%d", maxBatch))
	}
	if s.LeaseSeconds < minLeaseSeconds || s.LeaseSeconds > maxLeaseSeconds {
		errs = append(errs, fmt.Errorf("leaseSeconds must be within %d..%d", minLeaseSeconds, maxLeaseSeconds))
	}
	if s.HeartbeatTimeoutSeconds < minHeartbeatSecond || s.HeartbeatTimeoutSeconds > maxHeartbeatSecond {
		errs = append(errs, fmt.Errorf("heartbeatTimeoutSeconds must be within %d..%d", minHeartbeatSecond, maxHeartbeatSecond))
	}
	switch s.Mode {
	case ModeFIFO:
	case ModeLottery:
		if s.OpenAt == nil {
			errs = append(errs, errors.New("mode lottery needs openAt: the cohort drawn is everyone who joined before it"))
		}
	default:
		errs = append(errs, fmt.Errorf("mode must be %q or %q", ModeFIFO, ModeLottery))
	}
	return errors.Join(errs...)
}

// settingsPatch is the body of PUT /v1/admin/waitingrooms/{event}: fields
// left out keep their current value (or the default on creation); openAt
// null clears the open time.
type settingsPatch struct {
	Capacity                *int            `json:"capacity"`
	Batch                   *int            `json:"batch"`
	LeaseSeconds            *int            `json:"leaseSeconds"`
	HeartbeatTimeoutSeconds *int            `json:"heartbeatTimeoutSeconds"`
	OpenAt                  json.RawMessage `json:"openAt"`
	Mode                    *string         `json:"mode"`
	Paused                  *bool           `json:"paused"`
}

func (p settingsPatch) apply(s Settings) (Settings, error) {
	if p.Capacity != nil {
		s.Capacity = *p.Capacity
	}
	if p.Batch != nil {
		s.Batch = *p.Batch
	}
	if p.LeaseSeconds != nil {
		s.LeaseSeconds = *p.LeaseSeconds
	}
	if p.HeartbeatTimeoutSeconds != nil {
		s.HeartbeatTimeoutSeconds = *p.HeartbeatTimeoutSeconds
	}
	if p.Mode != nil {
		s.Mode = *p.Mode
	}
	if p.Paused != nil {
		s.Paused = *p.Paused
	}
	if len(p.OpenAt) > 0 {
		if string(p.OpenAt) == "null" {
			s.OpenAt = nil
		} else {
			var at time.Time
			if err := wire.StrictJSON(p.OpenAt, &at); err != nil {
				return s, errors.New("openAt must be an RFC 3339 time or null")
			}
			at = at.UTC()
			s.OpenAt = &at
		}
	}
	return s, s.validate()
}

// hash is the settings as stored in the event's settings hash, read by the
// scripts: times in Unix milliseconds, durations in seconds.
func (s Settings) hash() map[string]any {
	open := int64(0)
	if s.OpenAt != nil {
		open = s.OpenAt.UnixMilli()
	}
	paused := 0
	if s.Paused {
		paused = 1
	}
	return map[string]any{
		"cap": s.Capacity, "batch": s.Batch, "lease": s.LeaseSeconds, "hbt": s.HeartbeatTimeoutSeconds,
		"open": open, "mode": s.Mode, "paused": paused,
	}
}

func settingsFromHash(h map[string]string) (Settings, error) {
	num := func(k string) (int64, error) {
		n, err := strconv.ParseInt(h[k], 10, 64)
		if err != nil {
			return 0, fmt.Errorf("settings field %s: %q", k, h[k])
		}
		return n, nil
	}
	var s Settings
	var errs []error
	for k, dst := range map[string]*int{"cap": &s.Capacity, "batch": &s.Batch, "lease": &s.LeaseSeconds, "hbt": &s.HeartbeatTimeoutSeconds} {
		n, err := num(k)
		errs = append(errs, err)
		*dst = int(n)
	}
	open, err := num("open")
	errs = append(errs, err)
	if open > 0 {
		at := time.UnixMilli(open).UTC()
		s.OpenAt = &at
	}
	s.Mode = h["mode"]
	s.Paused = h["paused"] == "1"
	return s, errors.Join(errs...)
}

var eventPattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$`)

// validEvent tells whether id can name an event: 1 to 64 letters, digits,
// '.', '_' or '-', so it can sit inside a Redis hash tag.
func validEvent(id string) bool { return eventPattern.MatchString(id) }

// maxUserLen bounds the user id (the sub claim) stored in the line.
const maxUserLen = 200
