package rules

import (
	"sync"
	"text/template"
	tparse "text/template/parse"
)

// A rule's message is a text/template, executed once per finding. text/template walks its
// tree with reflection, which was most of the cost of a finding; the catalogue's messages use
// only text, {{.Field}} and {{if .Field}}...{{else if .Field}}...{{else}}...{{end}}, so such a
// template is compiled once into a plain list of steps with text/template's meaning (a string
// field is printed as is and is true when not empty, a bool prints "true" or "false"). A
// template using anything else (a --rules-file may) keeps the text/template execution.

// msgStep is one step of a compiled message: text, a field printed, or a branch.
type msgStep struct {
	// text is a text's words, each run of white space in it already one space; spaceBefore
	// and spaceAfter say whether it began or ended with white space (or is only that).
	text                    string
	spaceBefore, spaceAfter bool
	// field reads the string field printed (or, for a branch, tested); boolField a bool one.
	field     func(*TemplateData) string
	boolField func(*TemplateData) bool
	// branch: then runs when the field is true, els otherwise.
	branch    bool
	then, els []msgStep
}

// templateFields are the fields of TemplateData a compiled message can read.
var templateFields = map[string]func(*TemplateData) string{
	"Verb": func(d *TemplateData) string { return d.Verb }, "Resource": func(d *TemplateData) string { return d.Resource },
	"Subresource": func(d *TemplateData) string { return d.Subresource }, "GroupVersion": func(d *TemplateData) string { return d.GroupVersion },
	"APIGroup": func(d *TemplateData) string { return d.APIGroup }, "APIVersion": func(d *TemplateData) string { return d.APIVersion },
	"Namespace": func(d *TemplateData) string { return d.Namespace }, "Name": func(d *TemplateData) string { return d.Name },
	"Username": func(d *TemplateData) string { return d.Username }, "UserAgent": func(d *TemplateData) string { return d.UserAgent },
	"DeprecatedIn": func(d *TemplateData) string { return d.DeprecatedIn }, "RemovedIn": func(d *TemplateData) string { return d.RemovedIn },
	"Replacement": func(d *TemplateData) string { return d.Replacement }, "Detail": func(d *TemplateData) string { return d.Detail },
	"Value": func(d *TemplateData) string { return d.Value }, "Plugin": func(d *TemplateData) string { return d.Plugin },
	"Source": func(d *TemplateData) string { return d.Source }, "Component": func(d *TemplateData) string { return d.Component },
	"Since": func(d *TemplateData) string { return d.Since }, "Until": func(d *TemplateData) string { return d.Until },
}

var templateBoolFields = map[string]func(*TemplateData) bool{
	"ReplacementUnknown": func(d *TemplateData) bool { return d.ReplacementUnknown },
	"ControlPlane":       func(d *TemplateData) bool { return d.ControlPlane },
}

// compileMessage returns the steps of t, or false when t uses more than the subset above.
func compileMessage(t *template.Template) ([]msgStep, bool) {
	if t.Tree == nil || t.Root == nil || len(t.Templates()) != 1 {
		return nil, false // {{define}} or {{template}}: not compiled
	}
	return compileList(t.Root)
}

func compileList(l *tparse.ListNode) ([]msgStep, bool) {
	if l == nil {
		return nil, true
	}
	var out []msgStep
	for _, n := range l.Nodes {
		switch n := n.(type) {
		case *tparse.TextNode:
			out = append(out, textStep(string(n.Text)))
		case *tparse.ActionNode:
			st, ok := fieldOf(n.Pipe)
			if !ok {
				return nil, false
			}
			out = append(out, st)
		case *tparse.IfNode:
			st, ok := fieldOf(n.Pipe)
			if !ok {
				return nil, false
			}
			st.branch = true
			if st.then, ok = compileList(n.List); !ok {
				return nil, false
			}
			if st.els, ok = compileList(n.ElseList); !ok {
				return nil, false
			}
			out = append(out, st)
		default:
			return nil, false
		}
	}
	return out, true
}

// fieldOf reads a pipeline that is one field of TemplateData: {{.Name}}.
func fieldOf(p *tparse.PipeNode) (msgStep, bool) {
	if p == nil || len(p.Decl) != 0 || p.IsAssign || len(p.Cmds) != 1 || len(p.Cmds[0].Args) != 1 {
		return msgStep{}, false
	}
	f, ok := p.Cmds[0].Args[0].(*tparse.FieldNode)
	if !ok || len(f.Ident) != 1 {
		return msgStep{}, false
	}
	if get := templateFields[f.Ident[0]]; get != nil {
		return msgStep{field: get}, true
	}
	if get := templateBoolFields[f.Ident[0]]; get != nil {
		return msgStep{boolField: get}, true
	}
	return msgStep{}, false
}

// textStep is the step writing text: collapsed once here, not at every finding.
func textStep(text string) msgStep {
	var c collapser
	c.write(text)
	if len(c.out) == 0 {
		return msgStep{spaceBefore: text != "", spaceAfter: text != ""}
	}
	return msgStep{
		text:        string(c.out),
		spaceBefore: isSpace(text[0]),
		spaceAfter:  isSpace(text[len(text)-1]),
	}
}

func isSpace(c byte) bool {
	switch c {
	case ' ', '\t', '\n', '\r', '\v', '\f':
		return true
	}
	return false
}

// collapser appends text with each run of white space turned into one space and none at the
// start; a run at the end is dropped (collapseSpace, written as it goes).
type collapser struct {
	out   []byte
	space bool
}

func (c *collapser) write(s string) {
	for i := 0; i < len(s); {
		if isSpace(s[i]) {
			c.space = len(c.out) > 0
			i++
			continue
		}
		j := i + 1
		for j < len(s) && !isSpace(s[j]) {
			j++
		}
		if c.space {
			c.out = append(c.out, ' ')
			c.space = false
		}
		c.out = append(c.out, s[i:j]...)
		i = j
	}
}

// words writes a text step (see msgStep).
func (c *collapser) words(st *msgStep) {
	if st.spaceBefore {
		c.space = len(c.out) > 0
	}
	if st.text != "" {
		if c.space {
			c.out = append(c.out, ' ')
			c.space = false
		}
		c.out = append(c.out, st.text...)
	}
	if st.spaceAfter {
		c.space = len(c.out) > 0
	}
}

func (c *collapser) run(steps []msgStep, d *TemplateData) {
	for i := range steps {
		st := &steps[i]
		switch {
		case st.branch:
			var ok bool
			if st.field != nil {
				ok = st.field(d) != ""
			} else {
				ok = st.boolField(d)
			}
			if ok {
				c.run(st.then, d)
			} else {
				c.run(st.els, d)
			}
		case st.field != nil:
			c.write(st.field(d))
		case st.boolField != nil:
			if st.boolField(d) {
				c.write("true")
			} else {
				c.write("false")
			}
		default:
			c.words(st)
		}
	}
}

var messageBufs = sync.Pool{New: func() any { return new(collapser) }}

// render is prefix and the compiled message over d, white space collapsed.
func render(steps []msgStep, prefix string, d *TemplateData) string {
	c := messageBufs.Get().(*collapser)
	c.out, c.space = c.out[:0], false
	c.write(prefix)
	c.run(steps, d)
	s := string(c.out)
	if cap(c.out) <= 64<<10 {
		messageBufs.Put(c)
	}
	return s
}
