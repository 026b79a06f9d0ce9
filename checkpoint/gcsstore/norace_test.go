//go:build !race

package gcsstore_test

const raceEnabled = false
