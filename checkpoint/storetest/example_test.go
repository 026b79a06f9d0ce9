package storetest_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"syscall"

	"github.com/spotsafe/spotsafe/checkpoint/memstore"
	"github.com/spotsafe/spotsafe/checkpoint/storetest"
)

// A store whose disk fills up after 10 bytes, and whose second Delete fails.
func ExampleNewFaulty() {
	ctx := context.Background()
	f := storetest.NewFaulty(memstore.New(),
		storetest.NoSpace(10),
		storetest.FailCall(storetest.OpDelete, 2, nil),
	)
	fmt.Println(f.Put(ctx, "a", strings.NewReader("12345678"), 8))
	err := f.Put(ctx, "b", strings.NewReader("12345678"), 8)
	fmt.Println("disk full:", errors.Is(err, syscall.ENOSPC))
	fmt.Println(f.Delete(ctx, "a"))
	err = f.Delete(ctx, "a")
	fmt.Println("injected:", errors.Is(err, storetest.ErrInjected))
	fmt.Println("puts:", f.Calls(storetest.OpPut))
	// Output:
	// <nil>
	// disk full: true
	// <nil>
	// injected: true
	// puts: 2
}
