package noticetest_test

import (
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/spotsafe/spotsafe/notice"
	"github.com/spotsafe/spotsafe/notice/noticetest"
)

// Start a provider's fake by name and schedule a notice with the provider's
// nominal lead time, as `spotsafe fake tencent --interrupt-in 0s` does.
func ExampleNew() {
	f, err := noticetest.New("tencent", nil)
	if err != nil {
		panic(err)
	}
	defer f.Close()

	appear := time.Date(2018, 8, 18, 4, 3, 33, 0, time.UTC) // already past: visible now
	f.Schedule(notice.KindTerminate, appear, appear.Add(noticetest.NominalNotice("tencent", notice.KindTerminate)))

	resp, err := http.Get(f.URL() + "/latest/meta-data/spot/termination-time")
	if err != nil {
		panic(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	fmt.Println(resp.StatusCode, string(body)) // UTC+8 on the wire
	// Output: 200 2018-08-18 12:05:33
}
