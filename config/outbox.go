package config

import "time"

// Outbox configures the outbox relay.
type Outbox struct {
	PollInterval time.Duration `yaml:"poll_interval"`
	Batch        int           `yaml:"batch"`
	// Approximate length the event stream is trimmed to.
	StreamMaxLen int64 `yaml:"stream_max_len"`
	// Published rows are deleted after this long.
	Retention time.Duration `yaml:"retention"`
}

func defaultOutbox() Outbox {
	return Outbox{PollInterval: 100 * time.Millisecond, Batch: 200, StreamMaxLen: 100_000, Retention: 24 * time.Hour}
}

func (o Outbox) validate(bad badFunc) {
	if o.PollInterval <= 0 {
		bad("outbox.poll_interval", "must be a positive duration")
	}
	if o.Retention <= 0 {
		bad("outbox.retention", "must be a positive duration")
	}
	if o.Batch <= 0 {
		bad("outbox.batch", "must be positive")
	}
	if o.StreamMaxLen <= 0 {
		bad("outbox.stream_max_len", "must be positive")
	}
}
