package main

import (
	"context"
	"errors"
	"io"
)

// runWatch is replaced by the notices work.
func runWatch(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	return errors.New("not implemented yet")
}

// runFake is replaced by the notices work.
func runFake(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	return errors.New("not implemented yet")
}
