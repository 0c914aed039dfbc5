package main

import (
	"fmt"
	"io"
)

// weeklyMain stands in until the weekly report command is wired here.
func weeklyMain(_ []string, _, stderr io.Writer) int {
	fmt.Fprintln(stderr, "report weekly: not available in this build")
	return 1
}
