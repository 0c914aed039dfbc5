// Package grafana reads the auditlens dashboards (deploy/grafana) and expands their SQL the
// way Grafana and the grafana-clickhouse-datasource plugin do (template variables, then the
// plugin's $__ macros), so tests can run every panel's query on real ClickHouse engines.
package grafana

import (
	"encoding/json"
	"fmt"
	"math"
	"regexp"
	"strings"
	"time"
)

// PluginID is the datasource type every auditlens panel must use.
const PluginID = "grafana-clickhouse-datasource"

// Query is one panel query of a dashboard.
type Query struct {
	Panel string // panel title
	RefID string
	SQL   string
	// Format is the plugin's result format: 0 time series, 1 table (and so on).
	Format int
}

// Variable is a dashboard template variable.
type Variable struct {
	Name       string
	Type       string // query, custom, textbox, ...
	Query      string // SQL of a query variable
	Multi      bool
	IncludeAll bool
}

// Dashboard is what tests need of a dashboard JSON model.
type Dashboard struct {
	UID       string
	Title     string
	Queries   []Query
	Variables []Variable
}

type rawPanel struct {
	Title      string          `json:"title"`
	Type       string          `json:"type"`
	Datasource json.RawMessage `json:"datasource"`
	Targets    []struct {
		RefID      string          `json:"refId"`
		RawSQL     string          `json:"rawSql"`
		Format     int             `json:"format"`
		Datasource json.RawMessage `json:"datasource"`
	} `json:"targets"`
	Panels []rawPanel `json:"panels"` // rows
}

type rawDashboard struct {
	UID        string     `json:"uid"`
	Title      string     `json:"title"`
	Panels     []rawPanel `json:"panels"`
	Templating struct {
		List []struct {
			Name       string          `json:"name"`
			Type       string          `json:"type"`
			Query      json.RawMessage `json:"query"`
			Multi      bool            `json:"multi"`
			IncludeAll bool            `json:"includeAll"`
		} `json:"list"`
	} `json:"templating"`
}

// Parse reads a dashboard JSON model. Every panel with targets must query through the
// ClickHouse plugin with raw SQL.
func Parse(b []byte) (*Dashboard, error) {
	var raw rawDashboard
	if err := json.Unmarshal(b, &raw); err != nil {
		return nil, fmt.Errorf("dashboard json: %w", err)
	}
	d := &Dashboard{UID: raw.UID, Title: raw.Title}
	var walk func(ps []rawPanel) error
	walk = func(ps []rawPanel) error {
		for _, p := range ps {
			if p.Type == "row" || len(p.Targets) == 0 {
				if err := walk(p.Panels); err != nil {
					return err
				}
				continue
			}
			for _, t := range p.Targets {
				ds := t.Datasource
				if len(ds) == 0 {
					ds = p.Datasource
				}
				if !strings.Contains(string(ds), PluginID) {
					return fmt.Errorf("panel %q target %s: datasource %s is not %s", p.Title, t.RefID, ds, PluginID)
				}
				if strings.TrimSpace(t.RawSQL) == "" {
					return fmt.Errorf("panel %q target %s: no rawSql", p.Title, t.RefID)
				}
				d.Queries = append(d.Queries, Query{Panel: p.Title, RefID: t.RefID, SQL: t.RawSQL, Format: t.Format})
			}
		}
		return nil
	}
	if err := walk(raw.Panels); err != nil {
		return nil, err
	}
	for _, v := range raw.Templating.List {
		nv := Variable{Name: v.Name, Type: v.Type, Multi: v.Multi, IncludeAll: v.IncludeAll}
		if v.Type == "query" {
			var s string
			if err := json.Unmarshal(v.Query, &s); err != nil {
				var obj struct {
					RawSQL string `json:"rawSql"`
					Query  string `json:"query"`
				}
				if err := json.Unmarshal(v.Query, &obj); err != nil {
					return nil, fmt.Errorf("variable %s: query: %w", v.Name, err)
				}
				s = obj.RawSQL + obj.Query
			}
			nv.Query = s
		}
		d.Variables = append(d.Variables, nv)
	}
	return d, nil
}

// Context is what Grafana knows when it runs a query: the time range, the interval, and the
// values of the template variables.
type Context struct {
	From, To time.Time
	Interval time.Duration
	// Vars holds the selected values of each variable; a variable set to All lists all its
	// values and is named in All.
	Vars map[string][]string
	All  map[string]bool
}

// Expand does what Grafana and the plugin do to a query, in their order: the plugin's
// frontend resolves $__conditionalAll(condition, $var) (1=1 when var is All), Grafana
// interpolates the template variables, and the plugin's backend expands its macros.
func Expand(sql string, c Context) (string, error) {
	s, err := conditionalAll(sql, c)
	if err != nil {
		return "", err
	}
	if s, err = interpolate(s, c); err != nil {
		return "", err
	}
	return expandMacros(s, c)
}

const condAll = "$__conditionalAll"

func conditionalAll(sql string, c Context) (string, error) {
	var b strings.Builder
	for {
		i := strings.Index(sql, condAll+"(")
		if i < 0 {
			b.WriteString(sql)
			return b.String(), nil
		}
		b.WriteString(sql[:i])
		end, args, err := splitArgs(sql[i+len(condAll):])
		if err != nil {
			return "", fmt.Errorf("%s: %w", condAll, err)
		}
		if len(args) < 2 {
			return "", fmt.Errorf("%s: expected a condition and a variable", condAll)
		}
		v := strings.Trim(args[len(args)-1], "${}[] ")
		if i := strings.IndexByte(v, ':'); i >= 0 {
			v = v[:i]
		}
		if c.All[v] {
			b.WriteString("1=1")
		} else {
			b.WriteString(strings.Join(args[:len(args)-1], ", "))
		}
		sql = sql[i+len(condAll)+end:]
	}
}

var varRE = regexp.MustCompile(`\$\{([A-Za-z0-9_]+)(?::([A-Za-z0-9_]+))?\}|\[\[([A-Za-z0-9_]+)\]\]|\$([A-Za-z0-9_]+)`)

// interpolate replaces $var, ${var}, ${var:format} and [[var]]; $__ names are left to the
// macros. Multi values are joined with ',' (raw), or quoted with the singlequote,
// doublequote and sqlstring formats; a variable set to All in a $__conditionalAll argument
// becomes $__all.
func interpolate(sql string, c Context) (string, error) {
	var err error
	out := varRE.ReplaceAllStringFunc(sql, func(m string) string {
		sm := varRE.FindStringSubmatch(m)
		name, format := sm[1], sm[2]
		if name == "" {
			name = sm[3]
		}
		if name == "" {
			name = sm[4]
		}
		if strings.HasPrefix(name, "__") {
			return m // a macro or a Grafana global like $__interval handled later
		}
		vals, ok := c.Vars[name]
		if !ok {
			err = fmt.Errorf("template variable %s has no value", name)
			return m
		}
		quote := func(v string) string { return v }
		switch format {
		case "", "raw", "csv":
		case "singlequote":
			quote = func(v string) string { return "'" + strings.ReplaceAll(v, "'", `\'`) + "'" }
		case "doublequote":
			quote = func(v string) string { return `"` + strings.ReplaceAll(v, `"`, `\"`) + `"` }
		case "sqlstring":
			quote = func(v string) string { return "'" + strings.ReplaceAll(v, "'", "''") + "'" }
		default:
			err = fmt.Errorf("variable format %s of %s is not supported here", format, name)
			return m
		}
		q := make([]string, len(vals))
		for i, v := range vals {
			q[i] = quote(v)
		}
		return strings.Join(q, ",")
	})
	if err != nil {
		return "", err
	}
	return out, nil
}

var macroRE = regexp.MustCompile(`\$__([A-Za-z_]+)`)

// expandMacros replaces the plugin's macros ($__timeFilter(col), $__fromTime, ...).
func expandMacros(sql string, c Context) (string, error) {
	var b strings.Builder
	for {
		loc := macroRE.FindStringSubmatchIndex(sql)
		if loc == nil {
			b.WriteString(sql)
			return b.String(), nil
		}
		name := sql[loc[2]:loc[3]]
		b.WriteString(sql[:loc[0]])
		rest := sql[loc[1]:]
		var args []string
		if strings.HasPrefix(rest, "(") {
			end, a, err := splitArgs(rest)
			if err != nil {
				return "", fmt.Errorf("$__%s: %w", name, err)
			}
			args, rest = a, rest[end:]
		}
		exp, err := macro(name, args, c)
		if err != nil {
			return "", err
		}
		b.WriteString(exp)
		sql = rest
	}
}

// splitArgs reads "(a, f(b, c), d)" and returns the index after ')' and the arguments.
func splitArgs(s string) (int, []string, error) {
	depth := 0
	var args []string
	start := 1
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '(':
			depth++
		case ')':
			depth--
			if depth == 0 {
				args = append(args, strings.TrimSpace(s[start:i]))
				return i + 1, args, nil
			}
		case ',':
			if depth == 1 {
				args = append(args, strings.TrimSpace(s[start:i]))
				start = i + 1
			}
		case '\'':
			for i++; i < len(s) && s[i] != '\''; i++ {
				if s[i] == '\\' {
					i++
				}
			}
		}
	}
	return 0, nil, fmt.Errorf("unbalanced parentheses in %.60q", s)
}

func macro(name string, args []string, c Context) (string, error) {
	need := func(n int) error {
		if len(args) != n {
			return fmt.Errorf("$__%s: expected %d argument(s), got %d", name, n, len(args))
		}
		return nil
	}
	dt := func(t time.Time) string { return fmt.Sprintf("toDateTime(%d)", t.Unix()) }
	dt64 := func(t time.Time) string { return fmt.Sprintf("fromUnixTimestamp64Milli(%d)", t.UnixMilli()) }
	date := func(t time.Time) string { return fmt.Sprintf("toDate('%s')", t.UTC().Format(time.DateOnly)) }
	switch name {
	case "fromTime":
		return dt(c.From), nil
	case "toTime":
		return dt(c.To), nil
	case "fromTime_ms":
		return dt64(c.From), nil
	case "toTime_ms":
		return dt64(c.To), nil
	case "timeFilter", "timeFilter_ms":
		if err := need(1); err != nil {
			return "", err
		}
		f := dt
		if name == "timeFilter_ms" {
			f = dt64
		}
		return fmt.Sprintf("%s >= %s AND %s <= %s", args[0], f(c.From), args[0], f(c.To)), nil
	case "dateFilter":
		if err := need(1); err != nil {
			return "", err
		}
		return fmt.Sprintf("%s >= %s AND %s <= %s", args[0], date(c.From), args[0], date(c.To)), nil
	case "dateTimeFilter", "dt":
		if err := need(2); err != nil {
			return "", err
		}
		return fmt.Sprintf("(%s >= %s AND %s <= %s) AND (%s >= %s AND %s <= %s)",
			args[0], date(c.From), args[0], date(c.To), args[1], dt(c.From), args[1], dt(c.To)), nil
	case "timeInterval":
		if err := need(1); err != nil {
			return "", err
		}
		return fmt.Sprintf("toStartOfInterval(toDateTime(%s), INTERVAL %d second)", args[0], int(math.Max(c.Interval.Seconds(), 1))), nil
	case "timeInterval_ms":
		if err := need(1); err != nil {
			return "", err
		}
		return fmt.Sprintf("toStartOfInterval(toDateTime64(%s, 3), INTERVAL %d millisecond)", args[0], int(math.Max(float64(c.Interval.Milliseconds()), 1))), nil
	case "interval_s":
		return fmt.Sprint(int(math.Max(c.Interval.Seconds(), 1))), nil
	}
	return "", fmt.Errorf("unknown macro $__%s", name)
}
