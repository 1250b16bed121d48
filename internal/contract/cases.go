package contract

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"math/rand/v2"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/getkin/kin-openapi/openapi3"
)

// kase is one generated request and what it tried.
type kase struct {
	n    int
	op   *op // the operation it was made for (the target may reach another)
	req  *request
	what string // "valid", or the hostile input it carries
	// malformed: the head or framing is one the server may refuse before
	// any route.
	malformed bool
	// slow: the body never arrives whole; the answer waits for
	// http.body_read_timeout.
	slow bool
}

// generator makes the cases of one run: case n of a seed is always the
// same request (up to the fixtures' ids and the clock), so a failure
// names a case that -contract.seed and -contract.case replay.
type generator struct {
	seed uint64
	ops  []*op
	rs   []*route
	fx   *fixtures
	// bodyLimit is the server's http.body_limit_bytes.
	bodyLimit int
	// exclude names the hostile inputs left out of the run, by the
	// defect that makes them fail today (see excluded).
	exclude func(k *kase) string
}

// mutation turns a valid request into a hostile one; false when it does
// not apply to the operation.
type mutation struct {
	name   string
	weight int
	apply  func(g *gen, k *kase) bool
}

func (gn *generator) kase(n int) *kase {
	rng := rand.New(rand.NewPCG(gn.seed, uint64(n)))
	o := gn.ops[n%len(gn.ops)]
	g := &gen{rng: rng, fx: gn.fx, where: o.method + " " + o.path, run: gn}
	k := &kase{n: n, op: o, what: "valid"}
	k.req = gn.valid(g, o)
	if rng.IntN(100) < 35 {
		return k
	}
	total := 0
	for _, m := range mutations {
		total += m.weight
	}
	for range 8 { // a few tries: not every mutation fits every operation
		pick := rng.IntN(total)
		for _, m := range mutations {
			if pick -= m.weight; pick < 0 {
				if m.apply(g, k) {
					return k
				}
				break
			}
		}
	}
	return k
}

// valid is a request the document says the operation accepts, with
// credentials that verify.
func (gn *generator) valid(g *gen, o *op) *request {
	u := gn.fx.users[g.rng.IntN(len(gn.fx.users))]
	r := &request{method: o.method}
	path := o.path
	var query []string
	for _, p := range o.params {
		var s *openapi3.Schema
		if p.Schema != nil {
			s = p.Schema.Value
		}
		switch p.In {
		case "path":
			v := fmt.Sprint(g.value(s, p.Name, 0))
			esc := url.PathEscape(v)
			if p.Name == "asset" {
				esc = v
			}
			path = strings.Replace(path, "{"+p.Name+"}", esc, 1)
		case "query":
			if !p.Required && g.rng.IntN(2) == 0 {
				continue
			}
			v := g.value(s, p.Name, 0)
			if arr, ok := v.([]any); ok {
				for _, e := range arr {
					query = append(query, url.QueryEscape(p.Name)+"="+url.QueryEscape(fmt.Sprint(e)))
				}
				continue
			}
			query = append(query, url.QueryEscape(p.Name)+"="+url.QueryEscape(fmt.Sprint(v)))
		case "header":
			switch p.Name {
			case "Idempotency-Key":
				r.set(p.Name, matching(g.rng, `[!-~]{1,64}`))
			case "If-None-Match":
				if g.rng.IntN(2) == 0 {
					r.set(p.Name, `"`+g.text(8)+`"`)
				}
			}
		}
	}
	r.target = path
	if len(query) > 0 {
		r.target += "?" + strings.Join(query, "&")
	}
	if o.bearer {
		r.set("Authorization", "Bearer "+u.token)
	}
	if o.apiKey && !o.bearer {
		r.set("X-API-Key", gn.fx.apiKey)
	}
	if o.pass && u.pass != "" {
		r.set("X-Admission-Pass", u.pass)
	}
	if o.body != nil {
		r.set("Content-Type", "application/json")
		r.body = marshal(g.value(o.body, "", 0))
	}
	if o.signature {
		gn.sign(r)
	}
	return r
}

// sign signs r's body as the sandbox provider does (Stripe's scheme).
func (gn *generator) sign(r *request) {
	ts := strconv.FormatInt(time.Now().Unix(), 10)
	mac := hmac.New(sha256.New, []byte(gn.fx.webhookSecret))
	mac.Write([]byte(ts + "." + string(r.body)))
	r.set("Stripe-Signature", "t="+ts+",v1="+hex.EncodeToString(mac.Sum(nil)))
}

// The hostile inputs, by weight.
var mutations = []mutation{
	{"path parameter", 8, mutatePathParam},
	{"query parameter", 7, mutateQuery},
	{"header", 12, mutateHeader},
	{"body field", 16, mutateBodyField},
	{"body", 8, mutateBody},
	{"framing", 5, mutateFraming},
	{"method", 7, mutateMethod},
	{"path", 3, mutatePath},
}

// hostileStrings are strings every text input should refuse or carry
// through unharmed.
var hostileStrings = []string{
	"", " ", "\x00", "a\x00b", "\xff", "\xc0\xaf", "\xed\xa0\x80", "\u202e", "\r\n", "\t", "%00", "../..",
	"a/b", "😀", "ǅ", "\u0085", "\ufeff", "null", "true", "0", "-1", "1e400", "{}", "[]", "'", "\"", "\\",
	"<script>", "${jndi:x}", "%s%n", "DROP TABLE", "*", "?", "#", "a b",
}

// hostileString draws one, now and then very long.
func hostileString(g *gen) string {
	switch g.rng.IntN(12) {
	case 0:
		return strings.Repeat("a", 64+g.rng.IntN(2)) // around id limits
	case 1:
		return strings.Repeat("é", 129) // over 255 bytes
	case 2:
		return strings.Repeat("x", 64<<10)
	}
	return hostileStrings[g.rng.IntN(len(hostileStrings))]
}

func mutatePathParam(g *gen, k *kase) bool {
	var names []string
	for _, p := range k.op.params {
		if p.In == "path" {
			names = append(names, p.Name)
		}
	}
	if len(names) == 0 {
		return false
	}
	name := names[g.rng.IntN(len(names))]
	v := hostileString(g)
	var enc string
	switch g.rng.IntN(3) {
	case 0: // escaped, as a client library would send it
		enc = url.PathEscape(v)
	case 1: // the raw bytes, what a hand-made request may hold
		enc = strings.NewReplacer(" ", "%20", "?", "%3F", "#", "%23", "\r", "%0D", "\n", "%0A").Replace(v)
		k.malformed = true
	default: // escaped byte by byte
		var b strings.Builder
		for i := 0; i < len(v); i++ {
			fmt.Fprintf(&b, "%%%02X", v[i])
		}
		enc = b.String()
	}
	path, query, _ := strings.Cut(k.req.target, "?")
	rebuilt := k.op.path
	for _, p := range k.op.params {
		if p.In != "path" {
			continue
		}
		if p.Name == name {
			rebuilt = strings.Replace(rebuilt, "{"+p.Name+"}", enc, 1)
			continue
		}
		// Keep the other parameters' values from the valid request.
		rebuilt = strings.Replace(rebuilt, "{"+p.Name+"}", segmentOf(k.op.path, path, p.Name), 1)
	}
	k.req.target = rebuilt
	if query != "" {
		k.req.target += "?" + query
	}
	k.what = fmt.Sprintf("path parameter %s=%s", name, excerpt([]byte(v), 40))
	return true
}

// segmentOf is the value of param in path, a request path of template.
func segmentOf(template, path, param string) string {
	ts := strings.Split(template, "/")
	ps := strings.Split(path, "/")
	for i, s := range ts {
		if s == "{"+param+"}" && i < len(ps) {
			if param == "asset" {
				return strings.Join(ps[i:], "/")
			}
			return ps[i]
		}
	}
	return "x"
}

func mutateQuery(g *gen, k *kase) bool {
	path, query, _ := strings.Cut(k.req.target, "?")
	var names []string
	for _, p := range k.op.params {
		if p.In == "query" {
			names = append(names, p.Name)
		}
	}
	var add string
	switch {
	case len(names) == 0 || g.rng.IntN(5) == 0:
		// A parameter no one reads, or the token where it is not taken.
		add = []string{"token=" + url.QueryEscape(g.fx.users[0].token), "x=1", "limit=abc", "__proto__=1", strings.Repeat("a=1&", 2000) + "a=2"}[g.rng.IntN(5)]
		k.what = "unknown query parameter " + excerpt([]byte(add), 40)
	default:
		name := names[g.rng.IntN(len(names))]
		vals := []string{"", "abc", "0", "-1", "1.5", "1e3", "201", "2147483648", "9223372036854775808", "-9223372036854775809",
			"%00", "%FF", "%C0%AF", "0x10", "+5", " 5", "5 ", "true", "null", "2030-02-30", "2030-13-01", "0000-00-00",
			"99999-01-01", "2030-01-01T00:00:00Z", url.QueryEscape(strings.Repeat("a", 70)), url.QueryEscape(strings.Repeat("x", 32<<10)),
			url.QueryEscape(hostileString(g))}
		v := vals[g.rng.IntN(len(vals))]
		// Replace it, or send it twice.
		var kept []string
		for _, kv := range strings.Split(query, "&") {
			if kv != "" && (!strings.HasPrefix(kv, url.QueryEscape(name)+"=") || g.rng.IntN(2) == 0) {
				kept = append(kept, kv)
			}
		}
		add = strings.Join(append(kept, url.QueryEscape(name)+"="+v), "&")
		query = ""
		k.what = fmt.Sprintf("query parameter %s=%s", name, excerpt([]byte(v), 40))
		// A raw space ends the request-target early: a request line net/http refuses.
		k.malformed = strings.ContainsAny(v, " \t")
	}
	if query != "" {
		add = query + "&" + add
	}
	k.req.target = path + "?" + add
	return true
}

func mutateHeader(g *gen, k *kase) bool {
	r := k.req
	fx := g.fx
	type choice struct {
		what  string
		apply func()
	}
	choices := []choice{
		{"no Authorization", func() { r.del("Authorization") }},
		{"Authorization garbage", func() { r.set("Authorization", "Bearer "+hostileString(g)) }},
		{"Authorization not bearer", func() { r.set("Authorization", "Basic YWxpY2U6cHc=") }},
		{"Authorization bare", func() { r.set("Authorization", "Bearer") }},
		{"Authorization twice", func() {
			r.header = append(r.header, field{"Authorization", "Bearer " + fx.users[1].token})
		}},
		{"a token that does not verify", func() { r.set("Authorization", "Bearer "+fx.otherTokens[g.rng.IntN(len(fx.otherTokens))]) }},
		{"the token in the query", func() {
			r.del("Authorization")
			sep := "?"
			if strings.Contains(r.target, "?") {
				sep = "&"
			}
			r.target += sep + "token=" + url.QueryEscape(fx.users[0].token)
		}},
		{"no X-API-Key", func() { r.del("X-API-Key") }},
		{"X-API-Key wrong", func() { r.set("X-API-Key", hostileString(g)) }},
		{"X-API-Key twice", func() {
			r.header = append(r.header, field{"X-API-Key", fx.apiKey}, field{"X-API-Key", fx.apiKey})
		}},
		{"X-Admission-Pass garbage", func() { r.set("X-Admission-Pass", hostileString(g)) }},
		{"X-Admission-Pass of another user", func() { r.set("X-Admission-Pass", fx.users[1+g.rng.IntN(len(fx.users)-1)].pass) }},
		{"no Idempotency-Key", func() { r.del("Idempotency-Key") }},
		{"Idempotency-Key hostile", func() { r.set("Idempotency-Key", hostileString(g)) }},
		{"Idempotency-Key of 255 bytes", func() { r.set("Idempotency-Key", strings.Repeat("k", 255)) }},
		{"Idempotency-Key of 256 bytes", func() { r.set("Idempotency-Key", strings.Repeat("k", 256)) }},
		{"Idempotency-Key not UTF-8", func() { r.set("Idempotency-Key", "k\xff\xfe") }},
		{"Content-Type text/plain", func() { r.set("Content-Type", "text/plain") }},
		{"Content-Type garbage", func() { r.set("Content-Type", hostileString(g)) }},
		{"no Content-Type", func() { r.del("Content-Type") }},
		{"Accept image/png", func() { r.set("Accept", "image/png") }},
		{"Accept octet-stream", func() { r.set("Accept", "application/octet-stream") }},
		{"Accept event-stream", func() { r.set("Accept", "text/event-stream") }},
		{"Accept openmetrics", func() { r.set("Accept", "application/openmetrics-text; version=1.0.0") }},
		{"Accept garbage", func() { r.set("Accept", hostileString(g)) }},
		{"If-None-Match garbage", func() { r.set("If-None-Match", hostileString(g)) }},
		{"If-None-Match *", func() { r.set("If-None-Match", "*") }},
		{"X-Request-Id hostile", func() { r.set("X-Request-Id", hostileString(g)) }},
		{"X-Forwarded-For garbage", func() { r.set("X-Forwarded-For", hostileString(g)+", 10.0.0.1") }},
		{"X-Forwarded-For long", func() { r.set("X-Forwarded-For", strings.Repeat("1.2.3.4, ", 1000)+"5.6.7.8") }},
		{"Cookie garbage", func() { r.set("Cookie", "pd_vs="+hostileString(g)) }},
		{"Cookie twice", func() { r.header = append(r.header, field{"Cookie", "pd_vs=a"}, field{"Cookie", "pd_vs=b"}) }},
		{"Origin foreign", func() { r.set("Origin", "https://evil.example") }},
		{"Upgrade websocket without the rest", func() { r.set("Upgrade", "websocket") }},
		{"Range", func() { r.set("Range", "bytes=0-0,5-") }},
		{"Range past the end", func() { r.set("Range", "bytes=99999999-") }},
		{"Stripe-Signature garbage", func() { r.set("Stripe-Signature", hostileString(g)) }},
		{"Stripe-Signature old", func() { r.set("Stripe-Signature", "t=1,v1=00") }},
		{"Expect 100-continue", func() { r.set("Expect", "100-continue") }},
	}
	c := choices[g.rng.IntN(len(choices))]
	c.apply()
	k.what = "header: " + c.what
	for _, f := range r.header {
		if !validFieldValue(f.value) {
			k.malformed = true
		}
	}
	return true
}

// validFieldValue is what net/http's server accepts in a header value.
func validFieldValue(v string) bool {
	for i := 0; i < len(v); i++ {
		if c := v[i]; c < ' ' && c != '\t' || c == 0x7f {
			return false
		}
	}
	return true
}

func mutateBodyField(g *gen, k *kase) bool {
	if k.op.body == nil {
		return false
	}
	doc, ok := g.value(k.op.body, "", 0).(object)
	if !ok || len(k.op.body.Properties) == 0 {
		return false
	}
	s := k.op.body
	// Down into a nested object or array of objects now and then.
	path := ""
	var nest func(o object, s *openapi3.Schema) object
	nest = func(o object, s *openapi3.Schema) object {
		names := make([]string, 0, len(s.Properties))
		for n := range s.Properties {
			names = append(names, n)
		}
		slices.Sort(names)
		name := names[g.rng.IntN(len(names))]
		fs := s.Properties[name].Value
		if v, present := o.get(name); present && g.rng.IntN(3) == 0 {
			switch x := v.(type) {
			case object:
				path += name + "."
				return o.with(name, nest(x, fs))
			case []any:
				if len(x) > 0 && fs.Items != nil && len(fs.Items.Value.Properties) > 0 {
					if item, ok := x[0].(object); ok {
						path += name + "[0]."
						x = append([]any{nest(item, fs.Items.Value)}, x[1:]...)
						return o.with(name, x)
					}
				}
			}
		}
		path += name
		return mutateField(g, o, name, fs, &path)
	}
	doc = nest(doc, s)
	k.req.body = marshal(doc)
	k.what = "body field " + path
	if k.op.signature {
		// A hostile document with a good signature reaches the
		// provider's parser.
		g.run.sign(k.req)
	}
	return true
}

// mutateField makes the field name of o hostile.
func mutateField(g *gen, o object, name string, s *openapi3.Schema, path *string) object {
	v, _ := o.get(name)
	switch g.rng.IntN(10) {
	case 0:
		*path += " left out"
		return o.without(name)
	case 1:
		*path += " given twice"
		return append(o.with(name, v), member{name, g.value(s, name, 0)})
	case 2:
		*path += " miscased"
		return append(o.without(name), member{strings.ToUpper(name[:1]) + name[1:], v})
	case 3:
		*path += " and an unknown field"
		return append(o, member{[]string{"extra", "__proto__", "constructor", "", "\u0000", name + " "}[g.rng.IntN(6)], 1})
	case 4, 5:
		wrong := []any{nil, true, "1", raw("1.5"), raw("-0"), raw("1e400"), raw("-1e400"), raw("1E2"), object{}, []any{}, []any{[]any{}},
			raw("9223372036854775808"), raw("18446744073709551616"), raw("-9223372036854775809"), raw("123456789012345678901234567890")}
		for _, n := range interesting {
			wrong = append(wrong, n)
		}
		w := wrong[g.rng.IntN(len(wrong))]
		*path += "=" + string(marshal(w))
		return o.with(name, w)
	case 6, 7:
		hs := hostileString(g)
		var w any = hs
		if !validUTF8(hs) {
			w = raw(`"` + hs + `"`) // the raw bytes inside the JSON string
		}
		if g.rng.IntN(4) == 0 {
			w = raw(`"\u0000\ud800\udfff\uffff"`)
		}
		*path += "=" + excerpt([]byte(marshal(w)), 30)
		return o.with(name, w)
	case 8:
		var arr []any
		n := []int{0, 1, 7, 100, 10001}[g.rng.IntN(5)]
		for i := 0; i < n; i++ {
			arr = append(arr, g.value(itemsOf(s), "", 3))
		}
		*path += fmt.Sprintf(" as %d items", n)
		return o.with(name, arr)
	default:
		*path += " nested"
		return o.with(name, raw(strings.Repeat("[", 20)+strings.Repeat("]", 20)))
	}
}

func itemsOf(s *openapi3.Schema) *openapi3.Schema {
	if s != nil && s.Items != nil {
		return s.Items.Value
	}
	return s
}

func validUTF8(s string) bool { return strings.ToValidUTF8(s, "\x00\x00") == s }

func mutateBody(g *gen, k *kase) bool {
	r := k.req
	limit := g.run.bodyLimit
	bodies := []struct {
		what string
		body func() []byte
	}{
		{"empty", func() []byte { return nil }},
		{"null", func() []byte { return []byte("null") }},
		{"an array", func() []byte { return []byte("[]") }},
		{"a string", func() []byte { return []byte(`"x"`) }},
		{"a number", func() []byte { return []byte("1e400") }},
		{"cut short", func() []byte { b := r.body; return b[:len(b)/2] }},
		{"trailing data", func() []byte { return append(append([]byte{}, r.body...), "{}"...) }},
		{"a BOM first", func() []byte { return append([]byte("\xef\xbb\xbf"), r.body...) }},
		{"not UTF-8", func() []byte { return []byte("{\"\xff\":\"\xfe\"}") }},
		{"a NUL", func() []byte { return []byte("{\x00}") }},
		{"1 MiB of [", func() []byte { return []byte(strings.Repeat("[", limit-1)) }},
		{`1 MiB of {"a":`, func() []byte { return []byte(strings.Repeat(`{"a":`, (limit-1)/5)) }},
		{"33 levels", func() []byte { return []byte(strings.Repeat("[", 33) + strings.Repeat("]", 33)) }},
		{"32 levels", func() []byte { return []byte(strings.Repeat("[", 32) + strings.Repeat("]", 32)) }},
		{"over the body limit", func() []byte { return []byte(strings.Repeat(" ", limit+1)) }},
		{"at the body limit", func() []byte { return append([]byte(strings.Repeat(" ", limit-len(r.body))), r.body...) }},
		{"a long string", func() []byte { return []byte(`{"x":"` + strings.Repeat("a", limit-16) + `"}`) }},
		{"many fields", func() []byte {
			var b strings.Builder
			b.WriteString("{")
			for i := 0; i < 20000; i++ {
				fmt.Fprintf(&b, `"f%d":%d,`, i, i)
			}
			b.WriteString(`"z":0}`)
			return []byte(b.String())
		}},
	}
	c := bodies[g.rng.IntN(len(bodies))]
	r.body = c.body()
	k.what = "body " + c.what
	switch g.rng.IntN(12) {
	case 0:
		r.chunked = true
		k.what += ", chunked"
	case 1:
		// The length promises more than comes: the server waits for the
		// rest until http.body_read_timeout.
		r.declared = len(r.body) + 10
		k.slow = true
		k.what += ", cut short on the wire"
	}
	if k.op.signature && g.rng.IntN(2) == 0 {
		g.run.sign(k.req)
	}
	return true
}

func mutateFraming(g *gen, k *kase) bool {
	r := k.req
	k.malformed = true
	choices := []struct {
		what  string
		apply func()
	}{
		{"a control byte in a header", func() { r.set("X-Note", "a\x01b") }},
		{"NUL in a header", func() { r.set("X-Note", "a\x00b") }},
		{"DEL in a header", func() { r.set("User-Agent", "a\x7fb") }},
		{"escape bytes in Authorization", func() { r.set("Authorization", "Bearer \x1b[31m") }},
		{"a control byte in Idempotency-Key", func() { r.set("Idempotency-Key", "k\x01") }},
		{"a bad header name", func() { r.header = append(r.header, field{"X Bad", "1"}) }},
		{"a header name with a colon inside", func() { r.header = append(r.header, field{"X-A:B", "1"}) }},
		{"an empty header name", func() { r.header = append(r.header, field{"", "1"}) }},
		{"no Host", func() { r.noHost = true }},
		{"a bad Host", func() { r.set("Host", "a b") }},
		{"two Hosts", func() { r.header = append(r.header, field{"Host", "a"}, field{"Host", "b"}) }},
		{"Transfer-Encoding gzip", func() { r.set("Transfer-Encoding", "gzip") }},
		{"two Content-Lengths", func() { r.rawLength = "1\r\nContent-Length: 2" }},
		{"a negative Content-Length", func() { r.rawLength = "-1" }},
		{"a Content-Length that is not a number", func() { r.rawLength = "abc" }},
		{"a huge Content-Length", func() { r.rawLength = "99999999999999999999" }},
		{"Content-Length with Transfer-Encoding", func() { r.set("Transfer-Encoding", "chunked"); r.rawLength = "5" }},
		{"HTTP/1.0", func() { r.proto = "HTTP/1.0" }},
		{"HTTP/2.0", func() { r.proto = "HTTP/2.0" }},
		{"HTTP/1.9", func() { r.proto = "HTTP/1.9" }},
		{"a lowercase protocol", func() { r.proto = "http/1.1" }},
		{"an absolute target", func() { r.target = "http://other.example" + r.target }},
		{"an asterisk target", func() { r.target = "*" }},
		{"a target without a slash", func() { r.target = strings.TrimPrefix(r.target, "/") }},
		{"a head over 1 MiB", func() { r.set("X-Big", strings.Repeat("b", 1<<20+10)) }},
		{"a folded header", func() { r.set("X-Fold", "a\r\n b") }},
		{"a bare LF in a header", func() { r.set("X-Note", "a\nb") }},
		{"a space before the colon", func() { r.header = append(r.header, field{"X-Sp ", "1"}) }},
		{"an Expect other than 100-continue", func() { r.set("Expect", "teapot") }},
	}
	c := choices[g.rng.IntN(len(choices))]
	c.apply()
	k.what = "framing: " + c.what
	return true
}

func mutateMethod(g *gen, k *kase) bool {
	rt := match(g.run.rs, strings.SplitN(k.req.target, "?", 2)[0])
	var wrong []string
	for _, m := range methodsTried {
		if rt == nil || !rt.allows(m) {
			wrong = append(wrong, m)
		}
	}
	if len(wrong) == 0 {
		return false
	}
	k.req.method = wrong[g.rng.IntN(len(wrong))]
	k.what = "method " + k.req.method
	return true
}

func mutatePath(g *gen, k *kase) bool {
	path, _, _ := strings.Cut(k.req.target, "?")
	choices := []string{
		"/v1/nope", "/v1", "/v1/", "/v1/events", "/v1/admin", path + "/", path + "/extra", path + "/..", "//" + strings.TrimPrefix(path, "/"),
		"/V1" + strings.TrimPrefix(path, "/v1"), path + "%2F", path + ";x=1", "/" + strings.Repeat("a/", 2000), "/%00", "/%FF",
		"/js/../../etc/passwd", "/js/%2e%2e/%2e%2e/go.mod", "/css/", "/js/", "/demo/", "/.git/config", "/debug/pprof/",
	}
	k.req.target = choices[g.rng.IntN(len(choices))]
	k.what = "path " + excerpt([]byte(k.req.target), 40)
	return true
}
