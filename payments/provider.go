package payments

import "errors"

// Errors of ParseWebhook.
var (
	ErrBadSignature = errors.New("webhook signature does not verify")
	ErrMalformed    = errors.New("webhook body is not an event")
)

// errProviderTimeout marks a provider call that did not answer in time:
// the provider may have acted, so the caller must retry with the same key.
var errProviderTimeout = errors.New("payment provider did not answer in time")
