// Command build-kube-apiserver builds (or finds in the cache) the kube-apiserver the deploy
// tests run, and prints its path.
package main

import (
	"fmt"
	"os"

	"github.com/auditlens/auditlens/deploy/kubetest/kubeapiserver"
)

func main() {
	bin, err := kubeapiserver.Binary()
	if err != nil {
		fmt.Fprintf(os.Stderr, "build-kube-apiserver: %v\n", err)
		os.Exit(1)
	}
	fmt.Println(bin)
}
