package main

import (
	"io"

	"github.com/auditlens/auditlens/services/classify/checklist"
	"github.com/auditlens/auditlens/services/classify/manifests"
	"github.com/auditlens/auditlens/services/classify/scan"
)

// subcommands are the offline commands, dispatched before the service's flags are parsed.
var subcommands = map[string]func(args []string, stdin io.Reader, stdout, stderr io.Writer) int{
	"scan":      scan.Main,
	"manifests": manifests.Main,
	"catalogue": func(args []string, _ io.Reader, stdout, stderr io.Writer) int {
		return checklist.Main(args, stdout, stderr)
	},
}
