package tencentspot_test

import (
	"context"
	"fmt"
	"time"

	"github.com/spotsafe/spotsafe/notice"
	"github.com/spotsafe/spotsafe/notice/noticetest"
	"github.com/spotsafe/spotsafe/providers/tencentspot"
)

// Poll a (fake) CVM metadata server once. The server writes UTC+8 local
// time; the notice's deadline is in UTC. On an instance, New(nil) talks to
// the real server at metadata.tencentyun.com.
func ExampleSource_Poll() {
	fake, err := noticetest.NewTencent(nil)
	if err != nil {
		panic(err)
	}
	defer fake.Close()
	fake.Interrupt(notice.KindTerminate, time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC))

	src := tencentspot.New(&tencentspot.Options{Endpoint: fake.URL()})
	notices, err := src.Poll(context.Background())
	if err != nil {
		panic(err)
	}
	for _, n := range notices {
		fmt.Println(n.Detail["raw"], "->", n.Deadline.Format(time.RFC3339))
	}
	// Output: 2030-01-02 11:04:05 -> 2030-01-02T03:04:05Z
}

// ParseTime reads the documented format and its variants.
func ExampleParseTime() {
	for _, s := range []string{"2018-08-18 12:05:33", "18/08/2018 12:05:33", "2018-08-18T04:05:33Z"} {
		t, err := tencentspot.ParseTime(s)
		fmt.Println(t.Format(time.RFC3339), err)
	}
	// Output:
	// 2018-08-18T04:05:33Z <nil>
	// 2018-08-18T04:05:33Z <nil>
	// 2018-08-18T04:05:33Z <nil>
}
