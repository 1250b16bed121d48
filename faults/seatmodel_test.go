package faults_test

import (
	"fmt"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
)

// The history of seat ownership as the drills' clients saw it, checked
// for linearizability against a model where each seat has at most one
// owner: a hold answered 201 takes free seats for its reservation, a
// cancel answered 200 frees its reservation's seats, and a read of the
// system of record names the owner the model says. A refusal (409, 403,
// 429) changes nothing and is always allowed: a seat hint may refuse a
// free seat for booking.hint_claim_ttl after a hold that failed, which is
// a refusal, not a claim of ownership. A call answered 503 (or not at all)
// is retried with its Idempotency-Key until it gets a definitive answer,
// and the whole span is one operation: whichever attempt applied it did so
// inside the span.

type seatInput struct {
	Kind string // "hold", "release", "read"
	Res  string // the reservation held or released
}

type seatOutput struct {
	OK    bool   // hold: taken; release: freed
	Owner string // read: the live owner, "" for none
}

type seatOp struct {
	seat int64
	op   porcupine.Operation
}

// history records operations against a clock shared by every client.
type history struct {
	mu    sync.Mutex
	start time.Time
	ops   []seatOp
}

func newHistory() *history { return &history{start: time.Now()} }

// now is monotonic nanoseconds since the history began.
func (h *history) now() int64 { return time.Since(h.start).Nanoseconds() }

func (h *history) add(client int, seats []int64, in seatInput, out seatOutput, call, ret int64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, s := range seats {
		h.ops = append(h.ops, seatOp{seat: s, op: porcupine.Operation{ClientId: client, Input: in, Output: out, Call: call, Return: ret}})
	}
}

// seatModel is one seat's owner, partitioned by seat.
func seatModel(h []seatOp) porcupine.Model {
	bySeat := map[int64][]porcupine.Operation{}
	var order []int64
	for _, o := range h {
		if _, ok := bySeat[o.seat]; !ok {
			order = append(order, o.seat)
		}
		bySeat[o.seat] = append(bySeat[o.seat], o.op)
	}
	return porcupine.Model{
		Partition: func([]porcupine.Operation) [][]porcupine.Operation {
			out := make([][]porcupine.Operation, 0, len(order))
			for _, s := range order {
				out = append(out, bySeat[s])
			}
			return out
		},
		Init: func() any { return "" },
		Step: func(state, input, output any) (bool, any) {
			owner, in, out := state.(string), input.(seatInput), output.(seatOutput)
			switch in.Kind {
			case "hold":
				if !out.OK {
					return true, owner
				}
				return owner == "", in.Res
			case "release":
				if !out.OK {
					return true, owner
				}
				return owner == in.Res, ""
			default:
				return owner == out.Owner, owner
			}
		},
		DescribeOperation: func(input, output any) string {
			in, out := input.(seatInput), output.(seatOutput)
			if in.Kind == "read" {
				return fmt.Sprintf("read → %q", out.Owner)
			}
			return fmt.Sprintf("%s(%s) → %v", in.Kind, in.Res, out.OK)
		},
	}
}

// checkLinearizable checks the history so far; the answer is "ok",
// "illegal" or "unknown" (the checker ran out of time), with the count of
// operations, and for an illegal history the first seat whose operations
// have no linearization, listed.
func (h *history) checkLinearizable(timeout time.Duration) (string, int, string) {
	h.mu.Lock()
	ops := append([]seatOp(nil), h.ops...)
	h.mu.Unlock()
	all := make([]porcupine.Operation, len(ops))
	for i, o := range ops {
		all[i] = o.op
	}
	switch porcupine.CheckOperationsTimeout(seatModel(ops), all, timeout) {
	case porcupine.Ok:
		return "ok", len(ops), ""
	case porcupine.Illegal:
		return "illegal", len(ops), firstIllegalSeat(ops)
	}
	return "unknown", len(ops), ""
}

// firstIllegalSeat lists the operations of a seat whose history alone is
// not linearizable.
func firstIllegalSeat(ops []seatOp) string {
	bySeat := map[int64][]seatOp{}
	for _, o := range ops {
		bySeat[o.seat] = append(bySeat[o.seat], o)
	}
	for seat, seatOps := range bySeat {
		one := make([]porcupine.Operation, len(seatOps))
		for i, o := range seatOps {
			one[i] = o.op
		}
		if porcupine.CheckOperationsTimeout(seatModel(seatOps), one, 10*time.Second) != porcupine.Illegal {
			continue
		}
		sort.Slice(one, func(i, j int) bool { return one[i].Call < one[j].Call })
		var b strings.Builder
		fmt.Fprintf(&b, "seat %d:", seat)
		m := seatModel(seatOps)
		for _, o := range one {
			fmt.Fprintf(&b, "\n  client %d [%.3f s, %.3f s] %s", o.ClientId, float64(o.Call)/1e9, float64(o.Return)/1e9, m.DescribeOperation(o.Input, o.Output))
		}
		return b.String()
	}
	return "no single seat is illegal alone"
}

// The model refuses what a double sale or a lost hold looks like from the
// clients, and accepts overlapping calls in some order.
func TestSeatModelCatchesDoubleOwnersAndLostHolds(t *testing.T) {
	check := func(ops ...porcupine.Operation) porcupine.CheckResult {
		h := make([]seatOp, len(ops))
		for i, o := range ops {
			h[i] = seatOp{seat: 1, op: o}
		}
		return porcupine.CheckOperationsTimeout(seatModel(h), ops, 10*time.Second)
	}
	op := func(client int, in seatInput, out seatOutput, call, ret int64) porcupine.Operation {
		return porcupine.Operation{ClientId: client, Input: in, Output: out, Call: call, Return: ret}
	}
	hold := func(res string) seatInput { return seatInput{Kind: "hold", Res: res} }
	taken := seatOutput{OK: true}
	read := seatInput{Kind: "read"}
	// Two buyers both told 201 for the seat, one after the other, no release.
	if got := check(op(0, hold("r1"), taken, 0, 10), op(1, hold("r2"), taken, 20, 30)); got != porcupine.Illegal {
		t.Fatalf("double owner: %s", got)
	}
	// A 201 whose seat reads free afterwards: a lost committed hold.
	if got := check(op(0, hold("r1"), taken, 0, 10), op(1, read, seatOutput{Owner: ""}, 20, 30)); got != porcupine.Illegal {
		t.Fatalf("lost hold: %s", got)
	}
	// Released, then held by another; a read during the release may see either.
	if got := check(op(0, hold("r1"), taken, 0, 10), op(0, seatInput{Kind: "release", Res: "r1"}, seatOutput{OK: true}, 20, 40),
		op(2, read, seatOutput{Owner: "r1"}, 25, 35), op(1, hold("r2"), taken, 30, 50), op(2, read, seatOutput{Owner: "r2"}, 60, 70)); got != porcupine.Ok {
		t.Fatalf("a legal history: %s", got)
	}
	// A refusal while the seat is free is allowed (a hint of a failed hold).
	if got := check(op(0, hold(""), seatOutput{}, 0, 10), op(1, read, seatOutput{Owner: ""}, 20, 30)); got != porcupine.Ok {
		t.Fatalf("refusal: %s", got)
	}
}
