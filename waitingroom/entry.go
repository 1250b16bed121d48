package waitingroom

import "math/rand/v2"

// The line keeps one sorted-set member per queued user, whose score packs
// the place and the last heartbeat (see lua/entry.lua, the definition the
// scripts use). These mirror it for the draw and for tests that build
// lines directly.
const (
	beatModulo = 1 << 21 // heartbeat seconds are kept modulo this
	maxPlace   = 1<<32 - 1
)

// entryScore is the score of an entry at place whose last heartbeat was at
// unix second sec.
func entryScore(place, sec int64) float64 {
	return float64(place*beatModulo + ((sec%beatModulo)+beatModulo)%beatModulo)
}

// entryPlace is the place an entry's score holds.
func entryPlace(score float64) int64 {
	p := int64(score) / beatModulo
	if score < 0 && int64(score)%beatModulo != 0 {
		p-- // floor, as the scripts do
	}
	return p
}

// randomDrawKey is a lottery draw key: drawn entries take its negative as
// their place, so it stays within the places a score can hold.
func randomDrawKey() int64 { return rand.Int64N(maxPlace) + 1 }
