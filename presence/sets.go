package presence

// Small per-connection collections. Most connections follow a handful of
// users, and an idle one holds nothing at all: a short slice is smaller
// than a map (a map of one entry costs about 200 bytes) and as fast up to
// a few dozen entries. Past smallSet entries they switch to a map, so a
// connection following a thousand users stays O(1) per change. 32 keeps
// the usual follow of 20 or so in slices: its map cost a connect 1.6 KB.

const smallSet = 32

// subjectSet is a set of subjects: the changes waiting for a connection.
// The zero value is empty and holds no memory.
type subjectSet struct {
	list []*subject
	m    map[*subject]struct{}
}

func (s *subjectSet) add(x *subject) {
	if s.m != nil {
		s.m[x] = struct{}{}
		return
	}
	for _, y := range s.list {
		if y == x {
			return
		}
	}
	if len(s.list) < smallSet {
		s.list = append(s.list, x)
		return
	}
	s.m = make(map[*subject]struct{}, 2*smallSet)
	for _, y := range s.list {
		s.m[y] = struct{}{}
	}
	s.m[x] = struct{}{}
	s.list = nil
}

func (s *subjectSet) remove(x *subject) {
	if s.m != nil {
		delete(s.m, x)
		return
	}
	for i, y := range s.list {
		if y == x {
			last := len(s.list) - 1
			s.list[i] = s.list[last]
			s.list[last] = nil
			s.list = s.list[:last]
			return
		}
	}
}

func (s *subjectSet) len() int { return len(s.list) + len(s.m) }

// each calls f for every member.
func (s *subjectSet) each(f func(*subject)) {
	for _, x := range s.list {
		f(x)
	}
	for x := range s.m {
		f(x)
	}
}

// sentMemo remembers the status each subject last had in a frame to one
// connection, so an equal one is not sent again.
type sentMemo struct {
	keys []*subject
	vals []*Status
	m    map[*subject]*Status
}

func (s *sentMemo) get(x *subject) *Status {
	if s.m != nil {
		return s.m[x]
	}
	for i, y := range s.keys {
		if y == x {
			return s.vals[i]
		}
	}
	return nil
}

func (s *sentMemo) put(x *subject, st *Status) {
	if s.m != nil {
		s.m[x] = st
		return
	}
	for i, y := range s.keys {
		if y == x {
			s.vals[i] = st
			return
		}
	}
	if len(s.keys) < smallSet {
		s.keys = append(s.keys, x)
		s.vals = append(s.vals, st)
		return
	}
	s.m = make(map[*subject]*Status, 2*smallSet)
	for i, y := range s.keys {
		s.m[y] = s.vals[i]
	}
	s.m[x] = st
	s.keys, s.vals = nil, nil
}

func (s *sentMemo) forget(x *subject) {
	if s.m != nil {
		delete(s.m, x)
		return
	}
	for i, y := range s.keys {
		if y == x {
			last := len(s.keys) - 1
			s.keys[i], s.vals[i] = s.keys[last], s.vals[last]
			s.keys[last], s.vals[last] = nil, nil
			s.keys, s.vals = s.keys[:last], s.vals[:last]
			return
		}
	}
}

// keep drops every subject for which stay is false.
func (s *sentMemo) keep(stay func(*subject) bool) {
	if s.m != nil {
		for x := range s.m {
			if !stay(x) {
				delete(s.m, x)
			}
		}
		return
	}
	for i := 0; i < len(s.keys); {
		if stay(s.keys[i]) {
			i++
			continue
		}
		s.forget(s.keys[i])
	}
}
