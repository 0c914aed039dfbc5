package monitoring

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/model/rulefmt"
	"github.com/prometheus/prometheus/promql/parser"
	"github.com/prometheus/prometheus/promql/promqltest"
	"github.com/prometheus/prometheus/rules"
	"sigs.k8s.io/yaml"
)

// ruleFile extracts spec.groups of the PrometheusRule and parses it as a Prometheus rule file,
// strictly (unknown fields are errors), with every expression and template checked.
func ruleFile(t *testing.T) *rulefmt.RuleGroups {
	t.Helper()
	b, err := os.ReadFile("prometheus-rules.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var obj struct {
		Spec map[string]any `json:"spec"`
	}
	if err := yaml.Unmarshal(b, &obj); err != nil {
		t.Fatal(err)
	}
	spec, err := yaml.Marshal(obj.Spec)
	if err != nil {
		t.Fatal(err)
	}
	groups, errs := rulefmt.Parse(spec, false, model.UTF8Validation, parser.NewParser(parser.Options{}), slog.New(slog.DiscardHandler))
	for _, err := range errs {
		t.Error(err)
	}
	if len(errs) > 0 {
		t.FailNow()
	}
	return groups
}

func TestRulesParse(t *testing.T) {
	groups := ruleFile(t)
	var names []string
	for _, g := range groups.Groups {
		for _, r := range g.Rules {
			names = append(names, r.Alert)
			if r.Labels["severity"] == "" || r.Annotations["summary"] == "" || r.Annotations["description"] == "" {
				t.Errorf("%s: needs a severity label, a summary and a description", r.Alert)
			}
		}
	}
	want := []string{"AuditlensCheckpointStale", "AuditlensClassifyLagging", "AuditlensDeadLetters", "AuditlensIngestLagGrowing",
		"AuditlensNewUpgradeBlocker", "AuditlensNoAuditEvents", "AuditlensReportWriteErrors"}
	sort.Strings(names)
	if !slices.Equal(names, want) {
		t.Fatalf("alerts %v, want %v", names, want)
	}
}

// Every metric an alert reads is one the binaries export: a renamed metric would leave an alert
// that never fires.
func TestRulesUseExportedMetrics(t *testing.T) {
	exported := map[string]bool{}
	re := regexp.MustCompile(`"(auditlens_[a-z_]+)"`)
	for _, dir := range []string{"../../../../lib", "../../../../services"} {
		err := filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
			if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
				return err
			}
			b, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			for _, m := range re.FindAllSubmatch(b, -1) {
				exported[string(m[1])] = true
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	if len(exported) < 10 {
		t.Fatalf("found only %d metric names in the code: is the repository laid out as expected?", len(exported))
	}
	p := parser.NewParser(parser.Options{})
	for _, g := range ruleFile(t).Groups {
		for _, r := range g.Rules {
			expr, err := p.ParseExpr(r.Expr)
			if err != nil {
				t.Fatal(err)
			}
			parser.Inspect(expr, func(n parser.Node, _ []parser.Node) error {
				if vs, ok := n.(*parser.VectorSelector); ok && !exported[vs.Name] {
					t.Errorf("%s reads %s, which no binary exports", r.Alert, vs.Name)
				}
				return nil
			})
		}
	}
}

// unitTests is promtool's rule unit-test format (the subset used here).
type unitTests struct {
	EvaluationInterval model.Duration `json:"evaluation_interval"`
	Tests              []struct {
		Name        string         `json:"name"`
		Interval    model.Duration `json:"interval"`
		InputSeries []struct {
			Series string `json:"series"`
			Values string `json:"values"`
		} `json:"input_series"`
		AlertRuleTest []struct {
			EvalTime  model.Duration `json:"eval_time"`
			Alertname string         `json:"alertname"`
			ExpAlerts []struct {
				ExpLabels      map[string]string `json:"exp_labels"`
				ExpAnnotations map[string]string `json:"exp_annotations"`
			} `json:"exp_alerts"`
		} `json:"alert_rule_test"`
	} `json:"tests"`
}

// TestAlerts evaluates every alerting rule over the input series of each case in tests/, as
// Prometheus does (same engine, same alerting-rule state machine with its `for` durations), and
// compares the alerts firing at each eval_time with the expected ones, labels and annotations.
func TestAlerts(t *testing.T) {
	groups := ruleFile(t)
	files, _ := filepath.Glob("tests/*.yaml")
	if len(files) == 0 {
		t.Fatal("no rule tests in tests/")
	}
	tested := map[string]bool{}
	for _, file := range files {
		b, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		var ut unitTests
		if err := yaml.UnmarshalStrict(b, &ut); err != nil {
			t.Fatalf("%s: %v", file, err)
		}
		every := time.Duration(ut.EvaluationInterval)
		if every == 0 {
			every = time.Minute
		}
		for _, tc := range ut.Tests {
			t.Run(tc.Name, func(t *testing.T) {
				var load strings.Builder
				fmt.Fprintf(&load, "load %s\n", tc.Interval)
				for _, s := range tc.InputSeries {
					fmt.Fprintf(&load, "  %s %s\n", s.Series, s.Values)
				}
				st := promqltest.LoadedStorage(t, load.String())
				engine := promqltest.NewTestEngine(t, false, 0, 50000000)
				query := rules.EngineQueryFunc(engine, st)

				var alerting []*rules.AlertingRule
				p := parser.NewParser(parser.Options{})
				for _, g := range groups.Groups {
					for _, r := range g.Rules {
						expr, err := p.ParseExpr(r.Expr)
						if err != nil {
							t.Fatal(err)
						}
						alerting = append(alerting, rules.NewAlertingRule(r.Alert, expr, time.Duration(r.For), time.Duration(r.KeepFiringFor),
							labels.FromMap(r.Labels), labels.FromMap(r.Annotations), labels.EmptyLabels(), "", true, slog.New(slog.DiscardHandler)))
					}
				}
				checks := tc.AlertRuleTest
				sort.SliceStable(checks, func(i, j int) bool { return checks[i].EvalTime < checks[j].EvalTime })
				ts := time.Unix(0, 0).UTC()
				for _, check := range checks {
					end := time.Unix(0, 0).UTC().Add(time.Duration(check.EvalTime))
					for ; !ts.After(end); ts = ts.Add(every) {
						for _, r := range alerting {
							if _, err := r.Eval(context.Background(), 0, ts, query, &url.URL{}, 0); err != nil {
								t.Fatalf("%s at %s: %v", r.Name(), ts.Sub(time.Unix(0, 0)), err)
							}
						}
					}
					ts = end.Add(every)
					got := map[string]map[string]string{} // labels of each firing alert -> its annotations
					for _, r := range alerting {
						if r.Name() != check.Alertname {
							continue
						}
						tested[r.Name()] = true
						for _, a := range r.ActiveAlerts() {
							if a.State == rules.StateFiring {
								got[labelString(a.Labels.Map())] = a.Annotations.Map()
							}
						}
					}
					var want []string
					for _, e := range check.ExpAlerts {
						l := map[string]string{"alertname": check.Alertname}
						for k, v := range e.ExpLabels {
							l[k] = v
						}
						key := labelString(l)
						want = append(want, key)
						for k, v := range e.ExpAnnotations {
							if ann, ok := got[key]; ok && ann[k] != v {
								t.Errorf("%s at %s: annotation %s %q, want %q", key, time.Duration(check.EvalTime), k, ann[k], v)
							}
						}
					}
					gotKeys := slices.Sorted(maps.Keys(got))
					sort.Strings(want)
					if !slices.Equal(gotKeys, want) {
						t.Errorf("%s at %s:\n got  %q\n want %q", check.Alertname, time.Duration(check.EvalTime), gotKeys, want)
					}
				}
			})
		}
	}
	for _, g := range groups.Groups {
		for _, r := range g.Rules {
			if !tested[r.Alert] {
				t.Errorf("alert %s has no unit test in tests/", r.Alert)
			}
		}
	}
}

// labelString renders a label set with sorted keys.
func labelString(l map[string]string) string {
	var kv []string
	for k, v := range l {
		kv = append(kv, k+"="+v)
	}
	sort.Strings(kv)
	return "{" + strings.Join(kv, ",") + "}"
}
