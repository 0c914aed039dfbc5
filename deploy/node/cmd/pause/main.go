// Command pause is the node's pod sandbox process (containerd's sandbox_image): it holds the
// pod's namespaces and waits for a signal. Built here because no image is pulled from the
// internet.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	<-sig
}
