package wire

import (
	"net/url"
	"strings"
)

// QueryValues reads the values of one query parameter from rawQuery, in
// order, as url.ParseQuery would, without building the map of every
// parameter: a connect naming its subscriptions reads only those. ok
// reports whether the parameter appears; err a malformed escape.
func QueryValues(rawQuery, name string) (vals []string, ok bool, err error) {
	for rawQuery != "" {
		var kv string
		kv, rawQuery, _ = strings.Cut(rawQuery, "&")
		k, v, _ := strings.Cut(kv, "=")
		if k, err = unescapeQuery(k); err != nil {
			return nil, false, err
		}
		if k != name {
			continue
		}
		if v, err = unescapeQuery(v); err != nil {
			return nil, false, err
		}
		if vals == nil {
			vals = make([]string, 0, strings.Count(rawQuery, "&")+1)
		}
		vals = append(vals, v)
	}
	return vals, vals != nil, nil
}

// unescapeQuery is url.QueryUnescape, which allocates only when s holds an
// escape.
func unescapeQuery(s string) (string, error) {
	if !strings.ContainsAny(s, "%+") {
		return s, nil
	}
	return url.QueryUnescape(s)
}
