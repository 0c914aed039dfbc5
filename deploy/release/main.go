// Command release writes what a release ships, from the repository alone and reproducibly
// (the same commit gives the same bytes):
//
//	release notice -repo ../.. -out ../../NOTICE
//	release dist -repo ../.. -out ../../dist
package main

import (
	"fmt"
	"os"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintf(os.Stderr, "release: %v\n", err)
		os.Exit(1)
	}
}
