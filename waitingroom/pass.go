package waitingroom

import "github.com/presenced/presenced/internal/admission"

// The two ways a pass check fails (internal/admission's). Every error of
// Verify, Extend and Release wraps one of them.
var (
	// ErrNotAdmitted: the pass is not good for this user and event, or
	// there is no live lease behind it.
	ErrNotAdmitted = admission.ErrNotAdmitted
	// ErrUnavailable: the lease store failed; the caller must refuse (fail
	// closed) and may retry.
	ErrUnavailable = admission.ErrUnavailable
)
