//go:build race

package gcsstore_test

// raceEnabled is true under -race, where every request through the fake
// costs several times more.
const raceEnabled = true
