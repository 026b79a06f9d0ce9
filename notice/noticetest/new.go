package noticetest

import (
	"fmt"
	"strings"
	"time"

	"github.com/spotsafe/spotsafe/notice"
)

// providerNames lists the providers with a fake, in a fixed order.
var providerNames = [...]string{"aws", "gcp", "azure", "alibaba", "tencent"}

// Providers returns the names [New] accepts: aws, gcp, azure, alibaba,
// tencent.
func Providers() []string { return providerNames[:] }

// New starts the fake of the named provider (one of [Providers]). opts may
// be nil.
func New(provider string, opts *ServerOptions) (Fake, error) {
	switch provider {
	case "aws":
		return NewAWS(opts)
	case "gcp":
		return NewGCP(opts)
	case "azure":
		return NewAzure(opts)
	case "alibaba":
		return NewAlibaba(opts)
	case "tencent":
		return NewTencent(opts)
	}
	return nil, fmt.Errorf("noticetest: unknown provider %q (want one of %s)", provider, strings.Join(Providers(), ", "))
}

// NominalNotice is the lead time a provider documents between a notice of
// kind and the interruption, per PROTOCOLS.md: AWS 2 min (none for
// hibernate), GCP 30 s for a preemption and 60 s for host maintenance, Azure
// 30 s for Preempt, 5 min for Terminate (the minimum a scale set can be
// given), 10 min for Redeploy and 15 min for Reboot and Freeze, Alibaba 5 min,
// Tencent 2 min [unverified]. It returns 0 where the provider gives no lead
// time (AWS hibernate, an advisory rebalance) or the pair is unknown.
//
// Use it to schedule realistic notices: Schedule(kind, at, at.Add(d)).
func NominalNotice(provider string, kind notice.Kind) time.Duration {
	switch provider {
	case "aws":
		switch kind {
		case notice.KindTerminate, notice.KindStop:
			return 2 * time.Minute
		}
	case "gcp":
		switch kind {
		case notice.KindPreempt:
			return 30 * time.Second
		case notice.KindTerminate, notice.KindMigrate, notice.KindMaintenance:
			return 60 * time.Second
		}
	case "azure":
		switch kind {
		case notice.KindPreempt:
			return 30 * time.Second
		case notice.KindTerminate:
			return 5 * time.Minute
		case notice.KindRedeploy:
			return 10 * time.Minute
		case notice.KindReboot, notice.KindFreeze:
			return 15 * time.Minute
		}
	case "alibaba":
		if kind == notice.KindTerminate {
			return 5 * time.Minute
		}
	case "tencent":
		if kind == notice.KindTerminate {
			return 2 * time.Minute
		}
	}
	return 0
}
