// Command build-kube-node builds (or finds in the cache) the Kubernetes binaries of the
// one-node cluster (deploy/node) in one `go build`, and prints their directory.
package main

import (
	"fmt"
	"os"

	"github.com/auditlens/auditlens/deploy/kubetest/kubeapiserver"
)

func main() {
	dir, err := kubeapiserver.NodeBinaries()
	if err != nil {
		fmt.Fprintf(os.Stderr, "build-kube-node: %v\n", err)
		os.Exit(1)
	}
	fmt.Println(dir)
}
