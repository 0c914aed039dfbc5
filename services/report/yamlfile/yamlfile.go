// Package yamlfile reads the report's YAML files kept in git (owners, acknowledgements):
// strict decoding with errors at file:line:column, as classify's rule catalogue reports
// them, and a file reloaded when it changes, the last good version kept.
package yamlfile

import (
	"bytes"
	"errors"
	"fmt"
	"github.com/auditlens/auditlens/lib/yamlsafe"
	"log/slog"
	"os"
	"strings"
	"sync"

	"github.com/goccy/go-yaml"
	"github.com/goccy/go-yaml/ast"
)

// PosError is an error at a line and column of a file (line 0: the file as a whole).
type PosError struct {
	File         string
	Line, Column int
	Msg          string
}

func (e *PosError) Error() string {
	if e.Line > 0 {
		return fmt.Sprintf("%s:%d:%d: %s", e.File, e.Line, e.Column, e.Msg)
	}
	return fmt.Sprintf("%s: %s", e.File, e.Msg)
}

// Doc is a decoded file: At names positions in it.
type Doc struct {
	name string
	file *ast.File
}

// Decode decodes data (the file name) strictly into v: an unknown key, a value of the wrong
// type or a syntax error is a *PosError. An empty file decodes to the zero v.
func Decode(name string, data []byte, v any) (*Doc, error) {
	d := &Doc{name: name}
	// Within yamlsafe.Config: a file of a few hundred kilobytes of brackets, or a flat list
	// of millions of items, is refused before the parser holds it (review 3 E2).
	f, err := yamlsafe.Parse(data, yamlsafe.Config)
	if err != nil {
		return nil, d.yamlError(err)
	}
	d.file = f
	if len(f.Docs) > 1 {
		return nil, &PosError{File: name, Msg: "more than one YAML document"}
	}
	if len(f.Docs) == 0 || f.Docs[0].Body == nil {
		return d, nil
	}
	if err := yaml.NodeToValue(f.Docs[0].Body, v, yaml.Strict(), yaml.DisallowUnknownField()); err != nil {
		return nil, d.yamlError(err)
	}
	return d, nil
}

func (d *Doc) yamlError(err error) error {
	var ye yaml.Error
	if errors.As(err, &ye) && ye.GetToken() != nil {
		p := ye.GetToken().Position
		return &PosError{File: d.name, Line: p.Line, Column: p.Column, Msg: ye.GetMessage()}
	}
	return &PosError{File: d.name, Msg: err.Error()}
}

// At is an error at the YAML path (e.g. "$.acknowledgements[2].expires"): at its key when the
// path names a mapping value, else at the node; at the file when the path is not found.
func (d *Doc) At(path, format string, args ...any) *PosError {
	e := &PosError{File: d.name, Msg: fmt.Sprintf(format, args...)}
	if d.file == nil {
		return e
	}
	p, err := yaml.PathString(path)
	if err != nil {
		return e
	}
	n, err := p.FilterFile(d.file)
	if err != nil || n == nil {
		return e
	}
	tk := n.GetToken()
	if mv, ok := n.(*ast.MappingValueNode); ok {
		tk = mv.Key.GetToken()
	}
	if tk != nil {
		e.Line, e.Column = tk.Position.Line, tk.Position.Column
	}
	return e
}

// Line is "file:line" of the path, for naming an entry in reports.
func (d *Doc) Line(path string) string {
	e := d.At(path, "")
	if e.Line == 0 {
		return d.name
	}
	return fmt.Sprintf("%s:%d", d.name, e.Line)
}

// File is a YAML file parsed by Parse, reloaded when its content changes: a version that
// does not parse is logged and counted (Errors), and the last good one stays in force.
type File[T any] struct {
	Path  string
	Parse func(name string, data []byte) (T, error)
	Log   *slog.Logger
	// OnError, when set, is called for each version refused (e.g. a metric).
	OnError func(err error)

	mu      sync.RWMutex
	cur     T
	data    []byte
	lastErr error
}

// Open loads the file at path with parse (nil, nil when path is empty: no file); flag names the
// setting in the error that stops a service at start.
func Open[T any](flag, path string, parse func(name string, data []byte) (T, error), log *slog.Logger, onError func(error)) (*File[T], error) {
	if path == "" {
		return nil, nil
	}
	f := &File[T]{Path: path, Parse: parse, Log: log, OnError: onError}
	if err := f.Load(); err != nil {
		return nil, fmt.Errorf("%s: %w", flag, err)
	}
	return f, nil
}

// Load reads and parses the file; its error is the file's (a service refuses to start).
func (f *File[T]) Load() error {
	data, err := os.ReadFile(f.Path)
	if err != nil {
		return err
	}
	v, err := f.Parse(f.Path, data)
	if err != nil {
		return err
	}
	f.mu.Lock()
	f.cur, f.data, f.lastErr = v, data, nil
	f.mu.Unlock()
	return nil
}

// Current is the version in force.
func (f *File[T]) Current() T {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.cur
}

// Err is the error of the last version refused since the one in force, nil when none.
func (f *File[T]) Err() error {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.lastErr
}

// Reload reads the file again and puts a changed version in force when it parses; it
// returns whether a new version is in force, and the error of one refused.
func (f *File[T]) Reload() (bool, error) {
	data, err := os.ReadFile(f.Path)
	if err == nil {
		f.mu.RLock()
		same := bytes.Equal(data, f.data)
		f.mu.RUnlock()
		if same {
			return false, nil
		}
		var v T
		if v, err = f.Parse(f.Path, data); err == nil {
			f.mu.Lock()
			f.cur, f.data, f.lastErr = v, data, nil
			f.mu.Unlock()
			if f.Log != nil {
				f.Log.Info("file reloaded", "file", f.Path)
			}
			return true, nil
		}
	}
	f.mu.Lock()
	repeated := f.lastErr != nil && f.lastErr.Error() == err.Error()
	f.lastErr = err
	f.mu.Unlock()
	if !repeated {
		if f.Log != nil {
			f.Log.Error("file refused, the last good version stays in force", "file", f.Path, "err", err)
		}
		if f.OnError != nil {
			f.OnError(err)
		}
	}
	return false, err
}

// Pattern matches a string: "*" matches any run of characters (also none), everything else
// itself, case-sensitively; the empty pattern matches anything.
type Pattern string

// Match reports whether p matches s.
func (p Pattern) Match(s string) bool {
	if p == "" {
		return true
	}
	parts := strings.Split(string(p), "*")
	if len(parts) == 1 {
		return s == string(p)
	}
	if !strings.HasPrefix(s, parts[0]) {
		return false
	}
	s = s[len(parts[0]):]
	last := parts[len(parts)-1]
	for _, mid := range parts[1 : len(parts)-1] {
		i := strings.Index(s, mid)
		if i < 0 {
			return false
		}
		s = s[i+len(mid):]
	}
	return strings.HasSuffix(s, last)
}

// MatchesAny reports whether p matches one of ss.
func (p Pattern) MatchesAny(ss []string) bool {
	for _, s := range ss {
		if p.Match(s) {
			return true
		}
	}
	return false
}
