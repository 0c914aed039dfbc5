package classify_test

import (
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/goccy/go-yaml"
)

// The repository's GitHub Action (action.yml at its root, docs/github-action.md): its inputs
// and steps are checked, and its run: steps are run here with bash as the runner runs them,
// on manifests and audit logs of the testdata, the ${{ }} expressions replaced by the
// values the runner would give. The uses: steps (actions/setup-go, upload-sarif) are checked,
// not run.

type action struct {
	Name, Description, Author string
	Branding                  map[string]string
	Inputs                    map[string]actionInput
	Outputs                   map[string]struct{ Description, Value string }
	Runs                      struct {
		Using string
		Steps []actionStep
	}
}

type actionInput struct {
	Description string
	Required    bool
	Default     *string
}

type actionStep struct {
	Name  string
	ID    string `yaml:"id"`
	If    string `yaml:"if"`
	Uses  string
	Run   string
	Shell string
	With  map[string]string
	Env   map[string]string
}

const repoRoot = "../.."

func loadAction(t *testing.T) action {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(repoRoot, "action.yml"))
	if err != nil {
		t.Fatal(err)
	}
	var a action
	if err := yaml.UnmarshalWithOptions(data, &a, yaml.Strict()); err != nil {
		t.Fatalf("action.yml: %v", err)
	}
	return a
}

func TestActionDefinition(t *testing.T) {
	a := loadAction(t)
	if a.Runs.Using != "composite" {
		t.Errorf("runs.using %q, want composite", a.Runs.Using)
	}
	defaults := map[string]string{"mode": "manifests", "target-version": "", "current-version": "", "sarif-file": "auditlens.sarif", "upload-sarif": "true"}
	for name, def := range defaults {
		in, ok := a.Inputs[name]
		if !ok || in.Default == nil || *in.Default != def || in.Required {
			t.Errorf("input %s: %+v, want optional with default %q", name, in, def)
		}
	}
	if in, ok := a.Inputs["path"]; !ok || !in.Required || in.Default != nil {
		t.Errorf("input path: %+v, want required", in)
	}
	if len(a.Inputs) != 6 {
		t.Errorf("inputs %v", slices.Sorted(func(yield func(string) bool) {
			for k := range a.Inputs {
				if !yield(k) {
					return
				}
			}
		}))
	}
	if a.Outputs["exit-code"].Value != "${{ steps.classify.outputs.exit-code }}" {
		t.Errorf("output exit-code: %+v", a.Outputs["exit-code"])
	}
	var names []string
	for _, s := range a.Runs.Steps {
		names = append(names, s.Name)
		if (s.Uses == "") == (s.Run == "") {
			t.Errorf("step %q: want either uses or run", s.Name)
		}
		if s.Run != "" && s.Shell != "bash" {
			t.Errorf("step %q: shell %q, want bash (a composite action's run steps need one)", s.Name, s.Shell)
		}
		// Inputs reach scripts through env, never pasted into them (script injection).
		if strings.Contains(s.Run, "${{") {
			t.Errorf("step %q: an expression in its script:\n%s", s.Name, s.Run)
		}
	}
	if !slices.Equal(names, []string{"Set up Go", "Build classify", "Run classify", "Upload SARIF", "Fail on findings"}) {
		t.Fatalf("steps %q", names)
	}
	steps := a.Runs.Steps
	if s := steps[0]; !strings.HasPrefix(s.Uses, "actions/setup-go@") || s.With["go-version-file"] != "${{ github.action_path }}/services/classify/go.mod" {
		t.Errorf("setup-go: %+v", s)
	}
	if _, err := os.Stat(filepath.Join(repoRoot, "services", "classify", "go.mod")); err != nil {
		t.Errorf("setup-go's go-version-file: %v", err)
	}
	up := steps[3]
	if up.Uses != "github/codeql-action/upload-sarif@v3" || up.With["sarif_file"] != "${{ inputs.sarif-file }}" ||
		!strings.HasPrefix(up.If, "always()") || !strings.Contains(up.If, "inputs.upload-sarif == 'true'") ||
		!strings.Contains(up.If, "steps.classify.outputs.sarif-written == 'true'") {
		t.Errorf("upload step: %+v", up)
	}
	if s := steps[2]; s.ID != "classify" {
		t.Errorf("the classify step's id is %q: the outputs and later steps name it classify", s.ID)
	}
	if s := steps[4]; !strings.HasPrefix(s.If, "always()") || s.Env["EXIT_CODE"] != "${{ steps.classify.outputs.exit-code }}" {
		t.Errorf("last step: %+v", s)
	}
}

// runner runs the run: steps of the action in a workspace, as the GitHub runner does: bash
// --noprofile --norc -eo pipefail with the script, GITHUB_OUTPUT a new file for each step
// (its outputs read back as steps.ID.outputs), GITHUB_PATH added to PATH for the next steps.
type runner struct {
	t                    *testing.T
	a                    action
	workspace, temp, gh  string
	actionPath, origPATH string
	paths                []string
}

func newRunner(t *testing.T, a action) *runner {
	root, err := filepath.Abs(repoRoot)
	if err != nil {
		t.Fatal(err)
	}
	r := &runner{t: t, a: a, workspace: t.TempDir(), temp: t.TempDir(), gh: t.TempDir(), actionPath: root, origPATH: os.Getenv("PATH")}
	return r
}

var expr = regexp.MustCompile(`\$\{\{\s*(.*?)\s*\}\}`)

// eval replaces the expressions of s: inputs (given, else their default), github.action_path
// and steps.ID.outputs.NAME. Any other expression fails the test.
func (r *runner) eval(s string, inputs map[string]string, outputs map[string]map[string]string) string {
	return expr.ReplaceAllStringFunc(s, func(m string) string {
		e := expr.FindStringSubmatch(m)[1]
		switch {
		case e == "github.action_path":
			return r.actionPath
		case strings.HasPrefix(e, "inputs."):
			name := strings.TrimPrefix(e, "inputs.")
			in, ok := r.a.Inputs[name]
			if !ok {
				r.t.Fatalf("%s: no such input", m)
			}
			if v, ok := inputs[name]; ok {
				return v
			}
			if in.Default != nil {
				return *in.Default
			}
			return ""
		case strings.HasPrefix(e, "steps."):
			parts := strings.Split(e, ".")
			if len(parts) != 4 || parts[2] != "outputs" {
				r.t.Fatalf("%s: not a step output", m)
			}
			return outputs[parts[1]][parts[3]]
		}
		r.t.Fatalf("%s: an expression the test does not know", m)
		return ""
	})
}

// stepResult is how a run step ended.
type stepResult struct {
	code   int
	output string
}

// run runs the run: steps whose names pass only, in order, stopping at the first that
// fails, and returns how each ended, by name, and the step outputs.
func (r *runner) run(inputs map[string]string, only func(name string) bool) (map[string]stepResult, map[string]map[string]string) {
	t := r.t
	results := map[string]stepResult{}
	outputs := map[string]map[string]string{}
	ghPath := filepath.Join(r.gh, "path")
	for i, s := range r.a.Runs.Steps {
		if s.Run == "" || !only(s.Name) {
			continue
		}
		script := filepath.Join(r.gh, "step.sh")
		if err := os.WriteFile(script, []byte(r.eval(s.Run, inputs, outputs)), 0o644); err != nil {
			t.Fatal(err)
		}
		out := filepath.Join(r.gh, "output-"+strings.ReplaceAll(s.Name, " ", "-")+"-"+string(rune('0'+i)))
		if err := os.WriteFile(out, nil, 0o644); err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command("bash", "--noprofile", "--norc", "-eo", "pipefail", script)
		cmd.Dir = r.workspace
		path := r.origPATH
		for _, p := range r.paths {
			path = p + string(os.PathListSeparator) + path
		}
		cmd.Env = append(os.Environ(), "PATH="+path, "GITHUB_OUTPUT="+out, "GITHUB_ENV="+filepath.Join(r.gh, "env"),
			"GITHUB_PATH="+ghPath, "GITHUB_WORKSPACE="+r.workspace, "RUNNER_TEMP="+r.temp, "GITHUB_ACTIONS=true")
		for k, v := range s.Env {
			cmd.Env = append(cmd.Env, k+"="+r.eval(v, inputs, outputs))
		}
		b, err := cmd.CombinedOutput()
		code := 0
		var exit *exec.ExitError
		if errors.As(err, &exit) {
			code = exit.ExitCode()
		} else if err != nil {
			t.Fatalf("step %q: %v", s.Name, err)
		}
		results[s.Name] = stepResult{code, string(b)}
		if s.ID != "" {
			outputs[s.ID] = readOutputs(t, out)
		}
		if data, err := os.ReadFile(ghPath); err == nil {
			r.paths = strings.Fields(string(data))
		}
		if code != 0 {
			break
		}
	}
	return results, outputs
}

// readOutputs reads a GITHUB_OUTPUT file: NAME=VALUE lines and NAME<<DELIMITER blocks.
func readOutputs(t *testing.T, file string) map[string]string {
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	m := map[string]string{}
	lines := strings.Split(string(data), "\n")
	for i := 0; i < len(lines); i++ {
		l := lines[i]
		if name, delim, ok := strings.Cut(l, "<<"); ok && !strings.Contains(name, "=") {
			var v []string
			for i++; i < len(lines) && lines[i] != delim; i++ {
				v = append(v, lines[i])
			}
			m[name] = strings.Join(v, "\n")
			continue
		}
		if name, v, ok := strings.Cut(l, "="); ok {
			m[name] = v
		}
	}
	return m
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	data, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Dir(to), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(to, data, 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestActionRuns: the build step builds classify into RUNNER_TEMP and puts it on PATH; on
// a directory of manifests with removed APIs the classify step writes the SARIF log and
// succeeds, keeping classify's exit code 3 as its output, and the last step fails with it;
// clean manifests pass; audit logs in scan mode; a bad mode fails the classify step.
func TestActionRuns(t *testing.T) {
	if testing.Short() {
		t.Skip("builds classify")
	}
	if _, err := exec.LookPath("bash"); err != nil {
		t.Skip("no bash")
	}
	a := loadAction(t)
	r := newRunner(t, a)
	templates := filepath.Join("manifests", "testdata", "tree", "chart", "templates")
	copyFile(t, filepath.Join(templates, "old.yaml"), filepath.Join(r.workspace, "k8s", "old.yaml"))
	copyFile(t, filepath.Join(templates, "clean.yml"), filepath.Join(r.workspace, "k8s", "clean.yml"))
	copyFile(t, filepath.Join(templates, "clean.yml"), filepath.Join(r.workspace, "ok", "clean.yml"))
	copyFile(t, filepath.Join(repoRoot, "lib", "auditevent", "testdata", "real-world", "k8s-perf-tests-gce-scale.jsonl"),
		filepath.Join(r.workspace, "logs", "audit.log"))

	res, _ := r.run(nil, func(name string) bool { return name == "Build classify" })
	if b := res["Build classify"]; b.code != 0 {
		t.Fatalf("build step: exit %d\n%s", b.code, b.output)
	}
	if len(r.paths) != 1 || !strings.HasPrefix(r.paths[0], r.temp) {
		t.Fatalf("GITHUB_PATH: %v, want a directory in RUNNER_TEMP", r.paths)
	}
	if _, err := os.Stat(filepath.Join(r.paths[0], "classify")); err != nil {
		t.Fatalf("classify not built: %v", err)
	}
	notBuild := func(name string) bool { return name != "Build classify" }

	// Manifests with removed APIs: exit 3 kept, the log written, the job failed with 3.
	res, outputs := r.run(map[string]string{"path": "k8s", "target-version": "1.25"}, notBuild)
	if c := res["Run classify"]; c.code != 0 || outputs["classify"]["exit-code"] != "3" || outputs["classify"]["sarif-written"] != "true" ||
		outputs["classify"]["sarif-file"] != "auditlens.sarif" || !strings.Contains(c.output, "3 blocking an upgrade to 1.25") {
		t.Fatalf("classify step: exit %d, outputs %v\n%s", c.code, outputs, c.output)
	}
	if f := res["Fail on findings"]; f.code != 3 || !strings.Contains(f.output, "::error title=auditlens::") {
		t.Errorf("last step: exit %d, want 3\n%s", f.code, f.output)
	}
	data, err := os.ReadFile(filepath.Join(r.workspace, "auditlens.sarif"))
	if err != nil {
		t.Fatal(err)
	}
	var log struct {
		Version string
		Runs    []struct {
			Results []struct {
				RuleID    string `json:"ruleId"`
				Level     string
				Locations []struct {
					PhysicalLocation struct {
						ArtifactLocation struct{ URI string }
						Region           struct{ StartLine int }
					}
				}
			}
		}
	}
	if err := json.Unmarshal(data, &log); err != nil || log.Version != "2.1.0" || len(log.Runs) != 1 || len(log.Runs[0].Results) != 5 {
		t.Fatalf("SARIF log: %v\n%s", err, data)
	}
	psp := false
	for _, res := range log.Runs[0].Results {
		l := res.Locations[0].PhysicalLocation
		if l.ArtifactLocation.URI != "k8s/old.yaml" {
			t.Errorf("%s at %s: the path as given, relative to the workspace", res.RuleID, l.ArtifactLocation.URI)
		}
		if res.RuleID == "psp" {
			psp = res.Level == "error" && l.Region.StartLine == 25
		}
	}
	if !psp {
		t.Errorf("no PodSecurityPolicy error at k8s/old.yaml:25:\n%s", data)
	}

	// Clean manifests, the log in a directory of its own: the job passes.
	res, outputs = r.run(map[string]string{"path": "ok", "sarif-file": "reports/clean.sarif"}, notBuild)
	if c, f := res["Run classify"], res["Fail on findings"]; c.code != 0 || f.code != 0 || outputs["classify"]["exit-code"] != "0" {
		t.Errorf("clean: classify step %d, last step %d, outputs %v\n%s%s", c.code, f.code, outputs, c.output, f.output)
	}
	if data, err := os.ReadFile(filepath.Join(r.workspace, "reports", "clean.sarif")); err != nil || !strings.Contains(string(data), `"results": []`) {
		t.Errorf("clean SARIF log: %v\n%s", err, data)
	}

	// Audit logs: a directory in scan mode.
	// Target 1.16: before the leases' removal (1.22) and the 1.14 kubelets' (1.17, the version-skew policy).
	res, outputs = r.run(map[string]string{"path": "logs", "mode": "scan", "target-version": "1.16", "sarif-file": "scan.sarif"}, notBuild)
	if f := res["Fail on findings"]; f.code != 2 || outputs["classify"]["exit-code"] != "2" {
		t.Errorf("scan, removal after the target: last step %d, outputs %v\n%s", f.code, outputs, res["Run classify"].output)
	}
	if data, err := os.ReadFile(filepath.Join(r.workspace, "scan.sarif")); err != nil || !strings.Contains(string(data), `"uri": "logs/audit.log"`) ||
		!strings.Contains(string(data), `"name": "system:node:gce-scale-cluster-minion-group-2-v1fj"`) {
		t.Errorf("scan SARIF log: %v\n%s", err, data)
	}

	// A bad mode fails the classify step; the last step, with no exit code, would be skipped.
	res, outputs = r.run(map[string]string{"path": "k8s", "mode": "lint"}, notBuild)
	if c := res["Run classify"]; c.code != 1 || !strings.Contains(c.output, "want manifests or scan") || outputs["classify"]["exit-code"] != "" {
		t.Errorf("bad mode: exit %d, outputs %v\n%s", c.code, outputs, c.output)
	}
}
