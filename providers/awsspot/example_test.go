package awsspot_test

import (
	"context"
	"fmt"
	"time"

	"github.com/spotsafe/spotsafe/notice"
	"github.com/spotsafe/spotsafe/notice/noticetest"
	"github.com/spotsafe/spotsafe/providers/awsspot"
)

// ExampleNew watches a fake IMDS that announces a Spot termination. On EC2,
// pass nil options: the source finds IMDS at 169.254.169.254.
func ExampleNew() {
	imds, err := noticetest.NewAWS(nil)
	if err != nil {
		panic(err)
	}
	defer imds.Close()
	imds.RequireTokens(true) // HttpTokens=required, as on AL2023
	imds.Interrupt(notice.KindTerminate, time.Now().Add(2*time.Minute))

	src := awsspot.New(&awsspot.Options{Endpoint: imds.URL()})
	w := notice.NewWatcher([]notice.Source{src}, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_ = w.Watch(ctx, func(e notice.Event) {
		n := e.Notice
		fmt.Println(e.Type, n.Provider, n.Kind, "final:", n.Final(), "more than a minute left:", n.Remaining(time.Now()) > time.Minute)
		cancel() // a real program would checkpoint and exit here
	})
	// Output: notice aws terminate final: true more than a minute left: true
}

// ExampleSource_Poll reads a scheduled maintenance event once.
func ExampleSource_Poll() {
	imds, err := noticetest.NewAWS(nil)
	if err != nil {
		panic(err)
	}
	defer imds.Close()
	notBefore := time.Date(2030, 1, 21, 9, 0, 43, 0, time.UTC)
	imds.AddScheduledEvent(noticetest.AWSScheduledEvent{
		EventID:   "instance-event-0d59937288b749b32",
		Code:      "system-reboot",
		NotBefore: notBefore,
		NotAfter:  notBefore.Add(17 * time.Minute),
	})

	src := awsspot.New(&awsspot.Options{Endpoint: imds.URL()})
	ns, err := src.Poll(context.Background())
	if err != nil {
		panic(err)
	}
	for _, n := range ns {
		fmt.Println(n.ID, n.Kind, n.Deadline.Format(time.RFC3339), n.NotAfter.Format(time.RFC3339), n.Detail["code"])
	}
	// Output: instance-event-0d59937288b749b32 reboot 2030-01-21T09:00:43Z 2030-01-21T09:17:43Z system-reboot
}
