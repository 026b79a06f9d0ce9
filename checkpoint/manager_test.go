package checkpoint_test

import (
	"testing"

	"github.com/spotsafe/spotsafe/checkpoint"
	"github.com/spotsafe/spotsafe/checkpoint/memstore"
	"github.com/spotsafe/spotsafe/checkpoint/storetest"
)

func TestManagerMemstore(t *testing.T) {
	storetest.RunManagerTests(t, func(t *testing.T) checkpoint.Store { return memstore.New() })
}
