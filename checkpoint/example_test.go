package checkpoint_test

import (
	"context"
	"fmt"
	"io"
	"log"

	"github.com/spotsafe/spotsafe/checkpoint"
	"github.com/spotsafe/spotsafe/checkpoint/memstore"
)

func ExampleNewManager() {
	ctx := context.Background()
	m, err := checkpoint.NewManager(memstore.New(), &checkpoint.ManagerOptions{Keep: 2})
	if err != nil {
		log.Fatal(err)
	}
	defer m.Close(ctx)

	weights := []byte("weights of step 100")
	// Save returns once the state is captured; the upload runs in the
	// background.
	up, err := m.SaveSnapshot(ctx, checkpoint.Snapshot{
		Step: 100,
		Parts: []checkpoint.Part{
			checkpoint.Bytes("model.bin", weights),
			checkpoint.WriterFunc("loader.json", func(w io.Writer) error {
				_, err := io.WriteString(w, `{"epoch":3,"batch":1200}`)
				return err
			}),
		},
		Metadata: map[string]string{"loss": "0.71"},
	})
	if err != nil {
		log.Fatal(err)
	}
	weights[0] = 'W' // the training loop goes on; the save is unaffected
	if err := up.Wait(ctx); err != nil {
		log.Fatal(err)
	}

	// On restart: the newest checkpoint that verifies.
	cp, err := m.Latest(ctx)
	if err != nil {
		log.Fatal(err)
	}
	model, _ := cp.ReadPart(ctx, "model.bin")
	loader, _ := cp.ReadPart(ctx, "loader.json")
	fmt.Println(cp.Step, cp.Metadata()["loss"])
	fmt.Println(string(model))
	fmt.Println(string(loader))
	// Output:
	// 100 0.71
	// weights of step 100
	// {"epoch":3,"batch":1200}
}
