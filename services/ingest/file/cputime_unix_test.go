//go:build unix

package file_test

import (
	"syscall"
	"time"
)

// cpuTime is the CPU time (user and system) this process has used: on a saturated machine
// throughput follows CPU per event, which neighbours on the machine do not change.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
