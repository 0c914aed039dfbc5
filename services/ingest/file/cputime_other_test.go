//go:build !unix

package file_test

import "time"

// cpuTime is not measured here; benchmarks then report 0 cpu-ns/event.
func cpuTime() time.Duration { return 0 }
