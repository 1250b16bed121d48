package contract

import (
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"time"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/google/uuid"
)

// fixtures are what the run creates first, so that requests valid by the
// schema also reach the code behind the lookups: ids that exist, a pass
// that verifies, a reservation of the caller's.
type fixtures struct {
	apiKey        string
	webhookSecret string // the sandbox's Stripe-style signing secret
	users         []*user
	events        []string // events[0] has a waiting room every user passed
	sections      []string
	seats         []int64
	promo         string
	hotels        []string
	city          string
	roomTypes     []string
	reservations  []string // users[0]'s
	tickets       []string // users[0]'s
	intents       []string
	clientSecrets []string
	// otherTokens are user tokens that must not verify.
	otherTokens []string
}

type user struct {
	id, token, pass string
}

// hints are values that exist, by parameter or field name, drawn instead
// of a schema's random value most of the time.
func (f *fixtures) hint(rng *rand.Rand, where, name string) (any, bool) {
	pick := func(s []string) (any, bool) {
		if len(s) == 0 {
			return nil, false
		}
		return s[rng.IntN(len(s))], true
	}
	switch name {
	case "event":
		if strings.HasPrefix(where, "DELETE ") {
			// Deleting the fixtures' events (or their waiting rooms) would
			// starve the rest of the run of valid requests.
			return nil, false
		}
		return pick(f.events)
	case "hotel":
		return pick(f.hotels)
	case "user":
		return pick(f.userIDs())
	case "provider":
		return pick([]string{"sandbox", "sandbox", "stripe"})
	case "asset":
		if strings.Contains(where, " /css/") {
			return pick([]string{"site.css"})
		}
		return pick([]string{"presenced.js", "pages/sale.js"})
	case "section":
		return pick(f.sections)
	case "city":
		return f.city, true
	case "roomType":
		return pick(f.roomTypes)
	case "promoCode":
		return f.promo, true
	case "clientSecret":
		return pick(f.clientSecrets)
	case "users", "contacts":
		ids := f.userIDs()
		n := rng.IntN(len(ids) + 1)
		out := make([]any, n)
		for i := range out {
			out[i] = ids[rng.IntN(len(ids))]
		}
		return out, true
	case "seats":
		if len(f.seats) == 0 {
			return nil, false
		}
		out := make([]any, 1+rng.IntN(3))
		for i := range out {
			out[i] = f.seats[rng.IntN(len(f.seats))]
		}
		return out, true
	case "checkIn":
		return time.Now().AddDate(0, 0, 1+rng.IntN(20)).Format(time.DateOnly), true
	case "checkOut":
		return time.Now().AddDate(0, 0, 22+rng.IntN(10)).Format(time.DateOnly), true
	case "id":
		switch {
		case strings.Contains(where, " /v1/reservations/"):
			return pick(f.reservations)
		case strings.Contains(where, " /v1/tickets/"):
			return pick(f.tickets)
		case strings.Contains(where, " /v1/sandbox/"):
			return pick(f.intents)
		case strings.Contains(where, " /v1/presence/users/"):
			return pick(f.userIDs())
		}
	case "rows", "seatsPerRow":
		return int64(1 + rng.IntN(4)), true
	}
	return nil, false
}

func (f *fixtures) userIDs() []string {
	out := make([]string, len(f.users))
	for i, u := range f.users {
		out[i] = u.id
	}
	return out
}

// gen draws values from schemas.
type gen struct {
	rng *rand.Rand
	fx  *fixtures
	// where is the operation's method and path ("GET /v1/..."), for
	// hints that depend on it.
	where string
	run   *generator
}

// value draws a value the schema accepts; hinted names take an existing
// value most of the time.
func (g *gen) value(s *openapi3.Schema, name string, depth int) any {
	if name != "" && g.rng.IntN(10) < 8 {
		if v, ok := g.fx.hint(g.rng, g.where, name); ok {
			return v
		}
	}
	if s == nil {
		return "x"
	}
	if s.Const != nil {
		return s.Const
	}
	if len(s.Enum) > 0 {
		return s.Enum[g.rng.IntN(len(s.Enum))]
	}
	if len(s.OneOf) > 0 {
		return g.value(s.OneOf[g.rng.IntN(len(s.OneOf))].Value, name, depth)
	}
	if len(s.AnyOf) > 0 {
		return g.value(s.AnyOf[g.rng.IntN(len(s.AnyOf))].Value, name, depth)
	}
	types := []string{"string"}
	if s.Type != nil && len(s.Type.Slice()) > 0 {
		types = s.Type.Slice()
	} else if len(s.Properties) > 0 {
		types = []string{"object"}
	}
	switch t := types[g.rng.IntN(len(types))]; t {
	case "null":
		return nil
	case "boolean":
		return g.rng.IntN(2) == 0
	case "integer":
		return g.integer(s)
	case "number":
		return float64(g.integer(s)) + 0.5
	case "array":
		lo, hi := int(s.MinItems), int(s.MinItems)+4
		if s.MaxItems != nil {
			hi = int(*s.MaxItems)
		}
		if hi > lo+8 {
			hi = lo + 8
		}
		out := make([]any, lo+g.rng.IntN(hi-lo+1))
		for i := range out {
			var item *openapi3.Schema
			if s.Items != nil {
				item = s.Items.Value
			}
			out[i] = g.value(item, "", depth+1)
		}
		return out
	case "object":
		return g.object(s, depth)
	default:
		return g.str(s)
	}
}

// object draws every required field and some of the others.
func (g *gen) object(s *openapi3.Schema, depth int) object {
	var o object
	names := make([]string, 0, len(s.Properties))
	for n := range s.Properties {
		names = append(names, n)
	}
	slices.Sort(names)
	for _, n := range names {
		required := slices.Contains(s.Required, n)
		if !required && (depth > 3 || g.rng.IntN(2) == 0) {
			continue
		}
		o = append(o, member{n, g.value(s.Properties[n].Value, n, depth+1)})
	}
	return o
}

// interesting are the integers parsers and stores slip on.
var interesting = []int64{
	0, 1, -1, 2, 6, 7, 10, 59, 60, 61, 100, 255, 256, 1000, 1001, 3600, 10000, 65535, 65536,
	math.MaxInt32 - 1, math.MaxInt32, math.MaxInt32 + 1, math.MaxUint32, math.MaxUint32 + 1,
	1 << 53, 1<<53 + 1, math.MaxInt64 - 1, math.MaxInt64, math.MinInt32, math.MinInt32 - 1, math.MinInt64,
}

func (g *gen) integer(s *openapi3.Schema) int64 {
	lo, hi := int64(math.MinInt64), int64(math.MaxInt64)
	if s.Min != nil {
		lo = int64(*s.Min)
	}
	if s.Max != nil {
		hi = int64(*s.Max)
	}
	var in []int64
	for _, v := range interesting {
		if v >= lo && v <= hi {
			in = append(in, v)
		}
	}
	if s.Min != nil {
		in = append(in, lo)
	}
	if s.Max != nil {
		in = append(in, hi)
	}
	if g.rng.IntN(3) == 0 && len(in) > 0 {
		return in[g.rng.IntN(len(in))]
	}
	if lo < 0 && hi > 1000 {
		lo = 0
	}
	if hi-lo > 1000 || hi < lo {
		hi = lo + 1000
	}
	return lo + g.rng.Int64N(hi-lo+1)
}

func (g *gen) str(s *openapi3.Schema) string {
	switch s.Format {
	case "date-time":
		return g.dateTime()
	case "date":
		return g.dateTime()[:10]
	case "uuid":
		return uuid.NewString()
	}
	if s.Pattern != "" {
		return matching(g.rng, s.Pattern)
	}
	lo, hi := int(s.MinLength), int(s.MinLength)+12
	if s.MaxLength != nil {
		hi = int(*s.MaxLength)
	}
	n := lo + g.rng.IntN(hi-lo+1)
	if g.rng.IntN(4) == 0 {
		n = hi
	}
	return g.text(n)
}

// text is n runes of printable text, now and then beyond ASCII.
func (g *gen) text(n int) string {
	const alphabet = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_."
	wide := []rune("éßøΩжعह中😀")
	var b strings.Builder
	for range n {
		if g.rng.IntN(20) == 0 {
			b.WriteRune(wide[g.rng.IntN(len(wide))])
			continue
		}
		b.WriteByte(alphabet[g.rng.IntN(len(alphabet))])
	}
	return b.String()
}

// dateTime is an RFC 3339 time, now and then at the edges of what the
// format allows.
func (g *gen) dateTime() string {
	switch g.rng.IntN(8) {
	case 0:
		return "0001-01-01T00:00:00Z"
	case 1:
		return "9999-12-31T23:59:59Z"
	case 2:
		return "1970-01-01T00:00:00Z"
	case 3:
		return time.Now().Add(-time.Duration(g.rng.IntN(1000)) * time.Hour).UTC().Format(time.RFC3339)
	case 4:
		return time.Now().Add(time.Duration(g.rng.IntN(100000)) * time.Minute).Format("2006-01-02T15:04:05.999999999-07:00")
	}
	return time.Now().AddDate(0, 1+g.rng.IntN(24), g.rng.IntN(28)).UTC().Format(time.RFC3339)
}
