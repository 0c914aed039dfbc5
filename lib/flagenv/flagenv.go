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
	// A list flag given several times on the command line collects every value (--mail-to a
	// --mail-to b); its first use still replaces the default.
	lists := map[*flag.Flag]*StringList{}
	fs.VisitAll(func(f *flag.Flag) {
		if l, ok := f.Value.(*StringList); ok {
			lists[f] = l
			f.Value = &collecting{l: l}
		}
	})
	err := fs.Parse(args)
	for f, l := range lists {
		f.Value = l
	}
	if err != nil {
		return err
	}
	given := map[string]bool{}
	fs.Visit(func(f *flag.Flag) {
		given[f.Name] = true
		if a, ok := f.Value.(*alias); ok {
			given[a.to] = true // --old on the command line beats the env twin of --new
		}
	})
	fs.VisitAll(func(f *flag.Flag) {
		if err != nil || given[f.Name] {
			return
		}
		if a, ok := f.Value.(*alias); ok {
			if _, set := lookup(EnvName(a.to)); set || given[a.to] {
				return // the new name wins over the deprecated one
			}
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
		var old []string
		fs.VisitAll(func(f *flag.Flag) {
			if a, ok := f.Value.(*alias); ok {
				old = append(old, fmt.Sprintf("--%s (%s): use --%s", a.from, EnvName(a.from), a.to))
				return
			}
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
		if len(old) > 0 {
			fmt.Fprintf(w, "\nDeprecated names, still accepted:\n  %s\n", strings.Join(old, "\n  "))
		}
	}
}

// collecting is a StringList while the command line is parsed: the first Set replaces the
// list, later ones add to it.
type collecting struct {
	l   *StringList
	set bool
}

func (c *collecting) String() string {
	if c.l == nil {
		return ""
	}
	return c.l.String()
}

func (c *collecting) Set(v string) error {
	if !c.set {
		c.set = true
		return c.l.Set(v)
	}
	var more StringList
	if err := more.Set(v); err != nil {
		return err
	}
	*c.l = append(*c.l, more...)
	return nil
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

// Deprecated registers --old as a deprecated alias of the registered flag --new: setting it
// (or its environment twin) sets --new, and says once, on fs's output, that --old is
// deprecated. The new name wins when both are given. It does nothing when fs already has a
// flag named old (a command that gives the name another meaning).
func Deprecated(fs *flag.FlagSet, old, new string) {
	if fs.Lookup(old) != nil {
		return
	}
	target := fs.Lookup(new)
	if target == nil {
		panic("flagenv: deprecated alias --" + old + " of unknown flag --" + new)
	}
	fs.Var(&alias{fs: fs, from: old, to: new}, old, "deprecated: use --"+new)
}

// alias is the value of a deprecated flag name.
type alias struct {
	fs       *flag.FlagSet
	from, to string
	warned   bool
}

func (a *alias) String() string {
	if a == nil || a.fs == nil {
		return ""
	}
	return a.fs.Lookup(a.to).Value.String()
}

func (a *alias) Set(v string) error {
	if !a.warned {
		a.warned = true
		fmt.Fprintf(a.fs.Output(), "%s: flag --%s is deprecated: use --%s\n", a.fs.Name(), a.from, a.to)
	}
	return a.fs.Set(a.to, v)
}

// IsBoolFlag lets a deprecated bool flag be given without a value, as its new name can.
func (a *alias) IsBoolFlag() bool {
	b, ok := a.fs.Lookup(a.to).Value.(interface{ IsBoolFlag() bool })
	return ok && b.IsBoolFlag()
}
