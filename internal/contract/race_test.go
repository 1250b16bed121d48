//go:build race

package contract

// raceFactor scales the memory budget under the race detector.
const raceFactor = 2
