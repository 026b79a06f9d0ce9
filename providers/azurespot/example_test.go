package azurespot_test

import (
	"context"
	"fmt"
	"time"

	"github.com/spotsafe/spotsafe/notice"
	"github.com/spotsafe/spotsafe/notice/noticetest"
	"github.com/spotsafe/spotsafe/providers/azurespot"
)

// Poll a fake Azure IMDS that announces a Spot eviction. On a real VM, leave
// Endpoint empty.
func ExampleNew() {
	imds, err := noticetest.NewAzure(nil)
	if err != nil {
		panic(err)
	}
	defer imds.Close()
	imds.SetVMName("aks-spot-24469130-vmss_1")
	imds.Interrupt(notice.KindPreempt, time.Date(2031, 4, 11, 22, 26, 58, 0, time.UTC))
	// A broadcast for other members of the placement group is ignored.
	imds.AddEvent(noticetest.AzureEvent{EventType: "Reboot", Resources: []string{"aks-spot-24469130-vmss_2"}})

	src := azurespot.New(&azurespot.Options{Endpoint: imds.URL()})
	ns, err := src.Poll(context.Background())
	if err != nil {
		panic(err)
	}
	for _, n := range ns {
		fmt.Println(n.Kind, n.Final(), n.Deadline.Format(time.RFC3339), n.Detail["status"])
	}
	fmt.Println("filtered by", src.VMName())
	// Output:
	// preempt true 2031-04-11T22:26:58Z Scheduled
	// filtered by aks-spot-24469130-vmss_1
}

// Watch for events and approve a user-initiated reboot early. Approval lets
// the event proceed for every VM in its Resources.
func ExampleSource_Ack() {
	imds, err := noticetest.NewAzure(nil)
	if err != nil {
		panic(err)
	}
	defer imds.Close()
	imds.AddEvent(noticetest.AzureEvent{EventType: "Reboot", EventSource: "User", NotBefore: time.Now().Add(15 * time.Minute)})

	src := azurespot.New(&azurespot.Options{Endpoint: imds.URL()})
	w := notice.NewWatcher([]notice.Source{src}, &notice.WatcherOptions{Interval: 50 * time.Millisecond})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	_ = w.Watch(ctx, func(e notice.Event) {
		if e.Type == notice.EventNotice && e.Notice.Detail["source"] == "User" {
			if err := w.Ack(ctx, e.Notice); err != nil {
				fmt.Println("ack:", err)
			}
			fmt.Println(e.Notice.Kind, "approved:", len(imds.Acked()) == 1)
			cancel()
		}
	})
	// Output:
	// reboot approved: true
}
