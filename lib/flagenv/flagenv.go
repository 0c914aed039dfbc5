// Package flagenv gives every command-line flag an AUDITLENS_* environment twin.
package flagenv

import (
	"flag"
	"fmt"
	"os"
	"strings"
)

// Prefix of every environment twin.
const Prefix = "AUDITLENS_"

// EnvName is the environment twin of flag name: "nats-url" -> "AUDITLENS_NATS_URL".
func EnvName(flagName string) string {
	return Prefix + strings.ToUpper(strings.ReplaceAll(flagName, "-", "_"))
}

// Parse parses args into fs, then fills every flag not given on the command line from its
// environment twin, if set. A bad value names the variable it came from.
func Parse(fs *flag.FlagSet, args []string) error {
	return ParseWith(fs, args, os.LookupEnv)
}

// ParseWith is Parse with an explicit environment lookup (for tests).
func ParseWith(fs *flag.FlagSet, args []string, lookup func(string) (string, bool)) error {
	if err := fs.Parse(args); err != nil {
		return err
	}
	given := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
	var err error
	fs.VisitAll(func(f *flag.Flag) {
		if err != nil || given[f.Name] {
			return
		}
		name := EnvName(f.Name)
		v, ok := lookup(name)
		if !ok {
			return
		}
		if e := fs.Set(f.Name, v); e != nil {
			err = fmt.Errorf("environment %s=%q: %w", name, v, e)
		}
	})
	return err
}

// Usage installs a usage function that prints the synopsis and every flag with its
// environment twin.
func Usage(fs *flag.FlagSet, synopsis string) {
	fs.Usage = func() {
		w := fs.Output()
		fmt.Fprintf(w, "%s\n\nFlags (each also read from its environment twin):\n", strings.TrimSpace(synopsis))
		fs.VisitAll(func(f *flag.Flag) {
			typ, usage := flag.UnquoteUsage(f)
			if typ != "" {
				typ = " " + typ
			}
			fmt.Fprintf(w, "  --%s%s\n  \t%s (env %s", f.Name, typ, usage, EnvName(f.Name))
			if f.DefValue != "" && f.DefValue != "0" && f.DefValue != "false" && f.DefValue != "[]" {
				fmt.Fprintf(w, ", default %q", f.DefValue)
			}
			fmt.Fprintln(w, ")")
		})
	}
}

// StringList is a flag.Value holding a comma-separated list.
type StringList []string

func (l *StringList) String() string { return strings.Join(*l, ",") }

// Set implements flag.Value; it replaces the list.
func (l *StringList) Set(v string) error {
	*l = nil
	for _, s := range strings.Split(v, ",") {
		if s = strings.TrimSpace(s); s != "" {
			*l = append(*l, s)
		}
	}
	return nil
}
