package rules

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"text/template"

	auditlensv1 "github.com/auditlens/auditlens/proto/auditlens/v1"
)

// executed is the message as text/template gives it: the reference for the compiled one.
func executed(t *testing.T, tmpl *template.Template, prefix string, d TemplateData) string {
	t.Helper()
	var b strings.Builder
	b.WriteString(prefix)
	if err := tmpl.Execute(&b, d); err != nil {
		t.Fatal(err)
	}
	return collapseSpace(b.String())
}

// templateDatas are field values to render messages over: each field empty and set in turn,
// with runs of white space, leading and trailing spaces, and text that looks like a template.
func templateDatas() []TemplateData {
	values := []string{"", "v1beta1", "  a \t b\n\n c  ", "{{.Name}} <b>&amp;</b>", "é 世界\u00a0x", " "}
	var out []TemplateData
	typ := reflect.TypeFor[TemplateData]()
	for i := range 40 {
		var d TemplateData
		v := reflect.ValueOf(&d).Elem()
		for f := range typ.NumField() {
			switch fv := v.Field(f); fv.Kind() {
			case reflect.String:
				fv.SetString(values[(i*7+f*(i/len(values)+1))%len(values)])
			case reflect.Bool:
				fv.SetBool((i+f)%3 == 0)
			}
		}
		out = append(out, d)
	}
	return append(out, TemplateData{})
}

// TestCompiledMessagesMatchTextTemplate checks every rule of the catalogue, and templates
// that use each construct the compiler takes, against text/template's own execution.
func TestCompiledMessagesMatchTextTemplate(t *testing.T) {
	cat, err := Load()
	if err != nil {
		t.Fatal(err)
	}
	compiled := 0
	for _, r := range cat.Rules {
		if r.msg == nil {
			t.Errorf("rule %s: message not compiled (the catalogue's messages use only fields and ifs)", r.ID)
			continue
		}
		compiled++
		for _, prefix := range []string{"", appliedManifestNote, "  x  "} {
			for _, d := range templateDatas() {
				if got, want := render(r.msg, prefix, &d), executed(t, r.tmpl, prefix, d); got != want {
					t.Fatalf("rule %s over %+v:\n got %q\nwant %q", r.ID, d, got, want)
				}
			}
		}
	}
	if compiled < 10 {
		t.Fatalf("%d rules compiled", compiled)
	}
	for _, src := range []string{
		"",
		"plain text only",
		"  {{.Name}}  ",
		"{{if .Source}}a{{else if .Value}}b{{else if .ReplacementUnknown}}c{{else}}d{{end}}",
		"{{.ReplacementUnknown}} and {{if .ReplacementUnknown}}yes{{end}}",
		"{{- .Name -}} x {{ .Namespace }}\n\n{{if .Name}}\n  {{.Verb}}\n{{end}}",
		"{{if .Name}}{{if .Namespace}}{{.Namespace}}/{{end}}{{.Name}}{{else}}-{{end}}",
		"{{/* a comment */}}{{.Name}}",
		"\u00a0non-breaking\u00a0{{.Name}}\u00a0 \u0085 x\v{{.Verb}}\f",
		" \n ",
		"{{.Name}} \t {{.Verb}}",
	} {
		tmpl := template.Must(template.New("t").Option("missingkey=error").Parse(src))
		steps, ok := compileMessage(tmpl)
		if !ok {
			t.Fatalf("%q not compiled", src)
		}
		for _, d := range templateDatas() {
			if got, want := render(steps, "", &d), executed(t, tmpl, "", d); got != want {
				t.Fatalf("%q over %+v:\n got %q\nwant %q", src, d, got, want)
			}
		}
	}
}

// TestMessagesBeyondTheSubsetUseTextTemplate: a template with functions, pipes, variables,
// range or with is not compiled, and its finding's message is text/template's.
func TestMessagesBeyondTheSubsetUseTextTemplate(t *testing.T) {
	for _, src := range []string{
		`{{printf "%s!" .Name}}`,
		`{{.Name | printf "%q"}}`,
		`{{$n := .Name}}{{$n}}`,
		`{{with .Name}}{{.}}{{end}}`,
		`{{if and .Name .Verb}}x{{end}}`,
		`{{if not .Name}}x{{end}}`,
		`{{.}}`,
		`{{"literal"}}`,
		`{{define "x"}}a{{end}}{{template "x"}}`,
	} {
		tmpl := template.Must(template.New("t").Parse(src))
		if _, ok := compileMessage(tmpl); ok {
			t.Errorf("%q compiled: it should run through text/template", src)
		}
	}
	yaml := `schema_version: 1
rules:
  - id: removed-api
    severity: critical
    message: '{{printf "%s called %s" .Username .Resource}} {{with .Detail}}({{.}}){{end}}'
`
	file := filepath.Join(t.TempDir(), "extra.yaml")
	if err := os.WriteFile(file, []byte(yaml), 0o644); err != nil {
		t.Fatal(err)
	}
	cat, err := Load(file)
	if err != nil {
		t.Fatal(err)
	}
	e := NewEngine(cat)
	r := e.rules[RemovedAPI]
	if r == nil || r.msg != nil {
		t.Fatalf("rule %+v: want a template run by text/template", r)
	}
	m := &Match{Rule: r, Resource: "flowschemas", Detail: "a  detail"}
	got := e.message(&auditlensv1.Finding{Username: "ci-bot", Resource: "flowschemas"}, m, "")
	if want := "ci-bot called flowschemas (a detail)"; got != want {
		t.Fatalf("message %q, want %q", got, want)
	}
}
