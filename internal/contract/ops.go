package contract

import (
	"net/http"
	"slices"
	"sort"
	"strings"

	"github.com/getkin/kin-openapi/openapi3"
)

// op is one documented operation.
type op struct {
	id     string
	method string
	path   string // the document's template, /v1/events/{event}/holds
	item   *openapi3.PathItem
	spec   *openapi3.Operation
	params []*openapi3.Parameter // the path item's and the operation's
	// body is the application/json request body's schema, if any.
	body *openapi3.Schema
	// security names the schemes the operation may be called with.
	bearer, tokenQuery, apiKey, pass, signature bool
}

// operations lists the operations of doc, in a stable order.
func operations(doc *openapi3.T) []*op {
	var out []*op
	for path, item := range doc.Paths.Map() {
		if len(item.Servers) > 0 {
			continue // served by another program (the gate)
		}
		for method, o := range item.Operations() {
			p := &op{id: o.OperationID, method: method, path: path, item: item, spec: o}
			seen := map[string]bool{}
			for _, pr := range o.Parameters {
				p.params = append(p.params, pr.Value)
				seen[pr.Value.In+" "+pr.Value.Name] = true
			}
			for _, pr := range item.Parameters {
				if !seen[pr.Value.In+" "+pr.Value.Name] {
					p.params = append(p.params, pr.Value)
				}
			}
			if rb := o.RequestBody; rb != nil && rb.Value != nil {
				if mt := rb.Value.Content.Get("application/json"); mt != nil && mt.Schema != nil {
					p.body = mt.Schema.Value
				}
			}
			sec := doc.Security
			if o.Security != nil {
				sec = *o.Security
			}
			for _, req := range sec {
				for name := range req {
					switch name {
					case "bearerJWT":
						p.bearer = true
					case "tokenQuery":
						p.tokenQuery = true
					case "apiKey":
						p.apiKey = true
					case "admissionPass":
						p.pass = true
					case "providerSignature":
						p.signature = true
					}
				}
			}
			out = append(out, p)
		}
	}
	sort.Slice(out, func(i, j int) bool {
		return out[i].path < out[j].path || out[i].path == out[j].path && out[i].method < out[j].method
	})
	return out
}

// route is a document path and its methods, for matching what a request's
// target reaches.
type route struct {
	path    string
	segs    []string
	item    *openapi3.PathItem
	methods []string
	statics int
	// rest: the last segment is a parameter no other route continues
	// after, which the router lets take the rest of the path, slashes
	// and all (as it does {asset}).
	rest bool
}

func routes(doc *openapi3.T) []*route {
	var out []*route
	for path, item := range doc.Paths.Map() {
		r := &route{path: path, segs: strings.Split(strings.TrimPrefix(path, "/"), "/"), item: item}
		for m := range item.Operations() {
			r.methods = append(r.methods, m)
		}
		slices.Sort(r.methods)
		for _, s := range r.segs {
			if !strings.HasPrefix(s, "{") {
				r.statics++
			}
		}
		out = append(out, r)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].path < out[j].path })
	for _, r := range out {
		last := len(r.segs) - 1
		r.rest = strings.HasPrefix(r.segs[last], "{")
		for _, o := range out {
			if len(o.segs) > len(r.segs) && sameShape(o.segs[:len(r.segs)], r.segs) {
				r.rest = false
			}
		}
	}
	return out
}

// sameShape: the router's tree keeps one node for a parameter at a
// position, whatever its name.
func sameShape(a, b []string) bool {
	for i := range a {
		pa, pb := strings.HasPrefix(a[i], "{"), strings.HasPrefix(b[i], "{")
		if pa != pb || !pa && a[i] != b[i] {
			return false
		}
	}
	return true
}

// match finds the documented path a raw request path reaches, as the
// router does: static segments before parameters, the {asset} parameter
// taking the rest of the path. nil: none.
func match(rs []*route, rawPath string) *route {
	segs := strings.Split(strings.TrimPrefix(rawPath, "/"), "/")
	var best *route
	for _, r := range rs {
		if !r.matches(segs) {
			continue
		}
		if best == nil || r.statics > best.statics {
			best = r
		}
	}
	return best
}

func (r *route) matches(segs []string) bool {
	for i, s := range r.segs {
		if s == "{asset}" {
			return i < len(segs) // the rest of the path, maybe empty
		}
		if r.rest && i == len(r.segs)-1 {
			// An empty last parameter matches nothing (/v1/presence/users/).
			return i < len(segs) && strings.Join(segs[i:], "/") != ""
		}
		if i >= len(segs) {
			return false
		}
		if !strings.HasPrefix(s, "{") && s != segs[i] {
			return false
		}
	}
	return len(segs) == len(r.segs)
}

// allows tells whether method is one of the route's (a GET's HEAD is its
// own operation in the document).
func (r *route) allows(method string) bool { return slices.Contains(r.methods, method) }

// methodsTried are the methods sent to every path besides its own.
var methodsTried = []string{
	http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch,
	http.MethodDelete, http.MethodOptions, http.MethodTrace, "PROPFIND", "get",
}
