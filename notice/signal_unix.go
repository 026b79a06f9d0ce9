//go:build unix

package notice

import (
	"os"
	"syscall"
)

// signalName gives the conventional name (SIGTERM), which syscall's String
// does not ("terminated").
func signalName(sig os.Signal) string {
	if ss, ok := sig.(syscall.Signal); ok {
		switch ss {
		case syscall.SIGTERM:
			return "SIGTERM"
		case syscall.SIGINT:
			return "SIGINT"
		case syscall.SIGUSR1:
			return "SIGUSR1"
		case syscall.SIGUSR2:
			return "SIGUSR2"
		case syscall.SIGHUP:
			return "SIGHUP"
		case syscall.SIGQUIT:
			return "SIGQUIT"
		}
	}
	return sig.String()
}
