package config

import (
	"fmt"
	"net/url"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"time"
)

// Setting is one key of the effective configuration, as `presenced config
// print` shows it.
type Setting struct {
	Key string
	// Value is the value as YAML would write it; a secret's is redacted.
	Value string
	// Source is where it came from: "default", "file PATH", "env NAME" or
	// "flag".
	Source string
	Secret bool
}

// secretKeys hold credentials: their values are never printed.
var secretKeys = map[string]bool{
	"auth.api_key":                     true,
	"auth.jwt_secret":                  true,
	"payments.manifest_key":            true,
	"payments.notify.smtp_password":    true,
	"payments.notify.webhook_secret":   true,
	"payments.sandbox.webhook_secrets": true,
	"payments.stripe.secret_key":       true,
	"payments.stripe.webhook_secrets":  true,
	"payments.ticket_key":              true,
	"payments.ticket_old_keys":         true,
	"presence.webhook.secret":          true,
	"viewers.cookie_signing_key":       true,
	"viewers.peer_api_key":             true,
	"waitingroom.signing_key":          true,
}

// IsSecret tells whether key holds a credential.
func IsSecret(key string) bool { return secretKeys[key] }

// Explain loads the configuration like Load and says, for every key, its
// value and the layer that set it. Secrets are redacted, and so are
// passwords inside URLs.
func Explain(src Source) ([]Setting, Config, error) {
	sources := map[string]string{}
	cfg, err := load(src, sources)
	if err != nil {
		return nil, Config{}, err
	}
	fields := fieldIndex(&cfg)
	out := make([]Setting, 0, len(fields))
	for key, f := range fields {
		s := Setting{Key: key, Value: render(f.value), Source: "default", Secret: secretKeys[key]}
		if from, ok := sources[key]; ok {
			s.Source = from
		}
		switch {
		case s.Secret && s.Value != `""` && s.Value != "[]":
			s.Value = "<redacted>"
		case strings.HasSuffix(key, "url"):
			s.Value = redactURL(s.Value)
		}
		out = append(out, s)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Key < out[j].Key })
	return out, cfg, nil
}

func render(v reflect.Value) string {
	switch x := v.Interface().(type) {
	case time.Duration:
		return x.String()
	case []string:
		quoted := make([]string, len(x))
		for i, s := range x {
			quoted[i] = strconv.Quote(s)
		}
		return "[" + strings.Join(quoted, ", ") + "]"
	case string:
		return strconv.Quote(x)
	}
	return fmt.Sprint(v.Interface())
}

// redactURL hides a password in a quoted URL.
func redactURL(quoted string) string {
	raw, err := strconv.Unquote(quoted)
	if err != nil || raw == "" {
		return quoted
	}
	u, err := url.Parse(raw)
	if err != nil {
		if strings.Contains(raw, "@") {
			return `"<redacted>"`
		}
		return quoted
	}
	if u.User != nil {
		if _, has := u.User.Password(); has {
			u.User = url.UserPassword(u.User.Username(), "xxxxx")
		}
	}
	return strconv.Quote(u.String())
}
