package contract

import (
	"math/rand/v2"
	"regexp/syntax"
	"strings"
)

// matching returns a string the pattern matches, drawn with rng. The
// document's patterns are anchored character classes with bounded
// repetition; the standard library parses them, this only walks the tree.
func matching(rng *rand.Rand, pattern string) string {
	re, err := syntax.Parse(pattern, syntax.Perl)
	if err != nil {
		panic("contract: docs/openapi.yaml pattern " + pattern + ": " + err.Error())
	}
	var b strings.Builder
	emit(rng, &b, re.Simplify())
	return b.String()
}

func emit(rng *rand.Rand, b *strings.Builder, re *syntax.Regexp) {
	switch re.Op {
	case syntax.OpLiteral:
		b.WriteString(string(re.Rune))
	case syntax.OpCharClass:
		// Pairs of inclusive ranges; weight each by its size.
		total := 0
		for i := 0; i+1 < len(re.Rune); i += 2 {
			total += int(re.Rune[i+1]-re.Rune[i]) + 1
		}
		n := rng.IntN(total)
		for i := 0; i+1 < len(re.Rune); i += 2 {
			size := int(re.Rune[i+1]-re.Rune[i]) + 1
			if n < size {
				b.WriteRune(re.Rune[i] + rune(n))
				return
			}
			n -= size
		}
	case syntax.OpAnyCharNotNL, syntax.OpAnyChar:
		b.WriteByte(byte('a' + rng.IntN(26)))
	case syntax.OpConcat:
		for _, s := range re.Sub {
			emit(rng, b, s)
		}
	case syntax.OpAlternate:
		emit(rng, b, re.Sub[rng.IntN(len(re.Sub))])
	case syntax.OpCapture:
		emit(rng, b, re.Sub[0])
	case syntax.OpStar, syntax.OpPlus, syntax.OpQuest, syntax.OpRepeat:
		lo, hi := re.Min, re.Max
		switch re.Op {
		case syntax.OpStar:
			lo, hi = 0, 8
		case syntax.OpPlus:
			lo, hi = 1, 8
		case syntax.OpQuest:
			lo, hi = 0, 1
		}
		if hi < 0 {
			hi = lo + 8
		}
		// The bounds are where parsers slip: draw them often.
		n := lo
		switch rng.IntN(4) {
		case 0:
		case 1:
			n = hi
		default:
			n = lo + rng.IntN(hi-lo+1)
		}
		for range n {
			emit(rng, b, re.Sub[0])
		}
	}
	// Anchors and empty matches emit nothing.
}
