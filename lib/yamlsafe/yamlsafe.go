// Package yamlsafe is the one way auditlens parses YAML it did not write (manifests, Helm
// releases, the owners, acknowledgements and rules files): it refuses, before they cost
// memory, inputs whose parse would cost far more than their size. The parser (goccy/go-yaml)
// keeps every token (a few hundred bytes each), its memory grows with the square of the
// nesting depth, and aliases multiply a document when it is decoded, so a file of a few
// hundred bytes, or a flat list of a few megabytes, could otherwise take gigabytes.
package yamlsafe

import (
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/goccy/go-yaml"
	"github.com/goccy/go-yaml/ast"
	"github.com/goccy/go-yaml/parser"
	"github.com/goccy/go-yaml/scanner"
	"github.com/goccy/go-yaml/token"
)

// Limits bound one parse. A zero field takes the default of Config.
type Limits struct {
	// MaxBytes bounds the input.
	MaxBytes int
	// MaxDepth is the deepest nesting of collections accepted.
	MaxDepth int
	// MaxTokens bounds the tokens of the input (scalars, indicators, brackets): what the
	// parser holds, and so its memory (measured: BenchmarkParseAtTheTokenBound).
	MaxTokens int
	// MaxSize bounds each document's size as JSON with its aliases expanded; aliases may
	// also add at most aliasGrowth times the input plus aliasSlack bytes.
	MaxSize int
}

// Config are the limits of the files an operator writes (owners, acknowledgements, rules):
// far above any real one, far below what costs the process its memory.
var Config = Limits{MaxBytes: 8 << 20, MaxDepth: 100, MaxTokens: 1 << 20, MaxSize: 64 << 20}

// Manifests are the limits of one Kubernetes manifest or Helm release document (the
// decoded size is --max-document-size, set by the caller): a CRD's schema nests about 30 deep,
// a large release document a few hundred thousand tokens. At the token bound the parser holds
// about 400 MB (BenchmarkParseAtTheTokenBound: 399 MB for a flat flow list of 1 M tokens).
var Manifests = Limits{MaxBytes: 64 << 20, MaxDepth: 1000, MaxTokens: 1 << 20, MaxSize: 64 << 20}

const (
	// aliasGrowth and aliasSlack bound what aliases may add: a document may expand to
	// aliasGrowth times its input plus aliasSlack bytes (and never past MaxSize).
	aliasGrowth = 4
	aliasSlack  = 1 << 20
)

// Why an input was refused.
var (
	ErrTooDeep        = errors.New("nested too deeply")
	ErrAliasExpansion = errors.New("aliases expand too much")
	ErrTooLarge       = errors.New("too large")
)

func (l Limits) orDefaults() Limits {
	if l.MaxBytes <= 0 {
		l.MaxBytes = Config.MaxBytes
	}
	if l.MaxDepth <= 0 {
		l.MaxDepth = Config.MaxDepth
	}
	if l.MaxTokens <= 0 {
		l.MaxTokens = Config.MaxTokens
	}
	if l.MaxSize <= 0 {
		l.MaxSize = Config.MaxSize
	}
	return l
}

// Parse parses data (one or more documents) within l, refusing first, without allocating in
// proportion to the input: more than MaxBytes, nesting deeper than MaxDepth, more than
// MaxTokens tokens; then, on the tree, a document whose aliases expand past what l allows or
// whose decoded size passes MaxSize.
func Parse(data []byte, l Limits) (*ast.File, error) {
	l = l.orDefaults()
	if len(data) > l.MaxBytes {
		return nil, fmt.Errorf("%w: %d bytes, more than %d", ErrTooLarge, len(data), l.MaxBytes)
	}
	s := scan(data, l)
	switch {
	case s.depth > l.MaxDepth:
		return nil, fmt.Errorf("%w: more than %d levels of brackets (line %d)", ErrTooDeep, l.MaxDepth, s.line)
	case s.tokens > l.MaxTokens:
		return nil, fmt.Errorf("%w: more than %d tokens (line %d)", ErrTooLarge, l.MaxTokens, s.line)
	}
	tokens, err := tokenize(data, l.MaxDepth)
	if err != nil {
		return nil, err
	}
	f, err := parser.Parse(tokens, 0)
	if err != nil {
		return nil, err
	}
	for _, d := range f.Docs {
		if d == nil || d.Body == nil {
			continue
		}
		sz := sizer{anchors: map[string]int{}, limit: l.MaxSize + 1}
		size := sz.size(d.Body)
		switch {
		case sz.aliased && size > aliasGrowth*len(data)+aliasSlack && size > len(data):
			return nil, fmt.Errorf("%w: to more than %d bytes from %d (at most %d times the input plus %d)",
				ErrAliasExpansion, min(size, l.MaxSize), len(data), aliasGrowth, aliasSlack)
		case size > l.MaxSize:
			return nil, fmt.Errorf("%w: more than %d bytes once decoded", ErrTooLarge, l.MaxSize)
		}
	}
	return f, nil
}

// Message is err as one line: the parser's messages carry a source excerpt over several
// lines that repeats what the error names by line and column.
func Message(err error) string { return oneLine(yaml.FormatError(err, false, false)) }

// tokenize cuts data into tokens as the parser's lexer does, measuring the nesting as it goes
// so that a document nested too deeply is refused after maxDepth tokens, not after all of them
// (each token costs a few hundred bytes).
func tokenize(data []byte, maxDepth int) (token.Tokens, error) {
	var sc scanner.Scanner
	sc.Init(string(data))
	var tokens token.Tokens
	var d depth
	for {
		sub, err := sc.Scan()
		if errors.Is(err, io.EOF) {
			return tokens, nil
		}
		for _, t := range sub {
			if n := d.add(t); n > maxDepth {
				return nil, fmt.Errorf("%w: more than %d levels (line %d)", ErrTooDeep, maxDepth, t.Position.Line)
			}
		}
		tokens.Add(sub...)
	}
}

// scanned is what scan measured.
type scanned struct {
	depth, tokens, line int
}

// scan reads data once, with no allocation, and returns how deep its flow collections
// ([...] and {...}) nest and about how many tokens it holds (at least as many as the lexer
// makes: every bracket, comma and run of other characters outside quoted scalars, comments
// and block scalars), stopping at the line where either passes its limit: the lexer returns
// the tokens of a line at once, so a long line of brackets or a flat flow list of millions of
// items has to be refused before it. It skips quoted scalars, comments and the lines of block
// scalars (| and >), and in block context counts a bracket only where a value starts.
func scan(data []byte, l Limits) scanned {
	var deepest, tokens int
	flow, line := 0, 1
	inRun := false     // inside a run of characters that the lexer reads as one token
	valueStart := true // at a place where a flow collection may open in block context
	indent, lineStart, blockIndent := 0, true, -1
	lastNonSpace := byte('\n')
	for i := 0; i < len(data); i++ {
		c := data[i]
		if lineStart {
			j := i
			for j < len(data) && data[j] == ' ' {
				j++
			}
			if j < len(data) && data[j] != '\n' && data[j] != '\r' {
				if blockIndent >= 0 && j-i > blockIndent {
					tokens++                               // a line of a block scalar: the scalar is one token
					for i < len(data) && data[i] != '\n' { // a line of a block scalar
						i++
					}
					line++
					continue
				}
				blockIndent = -1
			} else if blockIndent >= 0 { // blank lines belong to the block scalar
				i = j
				if i < len(data) {
					line++
				}
				continue
			}
			indent, lineStart = j-i, false
			i = j - 1
			valueStart = flow == 0 || valueStart
			continue
		}
		switch {
		case c == ' ' || c == '\t' || c == '\r' || c == '\n':
			inRun = false
		case strings.IndexByte("[]{},", c) >= 0,
			c == ':' && (i+1 == len(data) || data[i+1] == ' ' || data[i+1] == '\n' || data[i+1] == '\r'): // a mapping value
			tokens++
			inRun = false
		case !inRun:
			tokens++
			inRun = true
		}
		if tokens > l.MaxTokens {
			return scanned{deepest, tokens, line}
		}
		switch {
		case c == '\n':
			if flow == 0 && (lastNonSpace == '|' || lastNonSpace == '>' || isBlockIndicator(data, i)) {
				blockIndent = indent
			}
			line++
			lineStart, valueStart, lastNonSpace = true, flow == 0, '\n'
			continue
		case c == '#' && (i == 0 || data[i-1] == ' ' || data[i-1] == '\t'):
			for i+1 < len(data) && data[i+1] != '\n' {
				i++
			}
			continue
		case (c == '"' || c == '\'') && (valueStart || flow > 0 && strings.IndexByte("[{,: \t", lastNonSpace) >= 0):
			for i++; i < len(data) && data[i] != c; i++ {
				if data[i] == '\\' && c == '"' {
					i++
				} else if data[i] == '\n' {
					line++
				}
			}
		case (c == '[' || c == '{') && (flow > 0 || valueStart):
			flow++
			if flow > deepest {
				deepest = flow
			}
			if deepest > l.MaxDepth {
				return scanned{deepest, tokens, line}
			}
		case (c == ']' || c == '}') && flow > 0:
			flow--
		}
		if c != ' ' && c != '\t' && c != '\r' {
			lastNonSpace = c
			// in block context a value starts after "- ", ": ", "? " and "--- "
			next := i+1 >= len(data) || data[i+1] == ' ' || data[i+1] == '\n'
			valueStart = flow == 0 && next && (c == '-' || c == ':' || c == '?')
		}
	}
	return scanned{deepest, tokens, line}
}

// isBlockIndicator reports whether the line ending at data[end] ends with a block scalar's
// header with indicators ("|-", ">+", "|2").
func isBlockIndicator(data []byte, end int) bool {
	j := end - 1
	for j >= 0 && (data[j] == ' ' || data[j] == '\r' || data[j] == '\t') {
		j--
	}
	for j >= 0 && (data[j] == '-' || data[j] == '+' || data[j] >= '1' && data[j] <= '9') {
		j--
	}
	return j >= 0 && (data[j] == '|' || data[j] == '>') && (j == 0 || data[j-1] == ' ' || data[j-1] == '\t')
}

// depth follows how deep the tokens nest: flow collections counted by their brackets, block
// collections by the indentation of the lines that open them (and the sequence entries
// stacked on one line, "- - x").
type depth struct {
	indents []int // columns of the open block levels
	flow    int
	line    int
}

// add accounts for t and returns the nesting depth at t.
func (d *depth) add(t *token.Token) int {
	if t.Type == token.CommentType {
		return d.flow + len(d.indents)
	}
	if d.flow == 0 {
		col := t.Position.Column
		if t.Position.Line != d.line {
			d.line = t.Position.Line
			for len(d.indents) > 0 && d.indents[len(d.indents)-1] > col {
				d.indents = d.indents[:len(d.indents)-1]
			}
			if len(d.indents) == 0 || d.indents[len(d.indents)-1] < col {
				d.indents = append(d.indents, col)
			}
		} else if t.Type == token.SequenceEntryType || t.Type == token.MappingKeyType {
			d.indents = append(d.indents, col)
		}
	}
	switch t.Type {
	case token.SequenceStartType, token.MappingStartType:
		d.flow++
	case token.SequenceEndType, token.MappingEndType:
		d.flow = max(d.flow-1, 0)
	}
	return d.flow + len(d.indents)
}

// sizer estimates the size of a document as JSON with its aliases expanded, without expanding
// them: an anchor's size is computed once and added at each alias. Sizes saturate at limit.
type sizer struct {
	anchors map[string]int
	limit   int
	aliased bool
}

func (s *sizer) add(a, b int) int {
	if a+b > s.limit || a+b < 0 {
		return s.limit
	}
	return a + b
}

func (s *sizer) size(n ast.Node) int {
	switch n := n.(type) {
	case nil:
		return 4 // null
	case *ast.DocumentNode:
		return s.size(n.Body)
	case *ast.MappingNode:
		total := 2
		for _, kv := range n.Values {
			total = s.add(total, s.size(kv))
		}
		return total
	case *ast.MappingValueNode:
		return s.add(s.add(s.size(n.Key), s.size(n.Value)), 2)
	case *ast.MappingKeyNode:
		return s.size(n.Value)
	case *ast.SequenceNode:
		total := 2
		for _, v := range n.Values {
			total = s.add(total, s.add(s.size(v), 1))
		}
		return total
	case *ast.TagNode:
		return s.size(n.Value)
	case *ast.LiteralNode:
		if n.Value == nil {
			return 2
		}
		return s.size(n.Value)
	case *ast.AnchorNode:
		size := s.size(n.Value)
		if n.Name != nil {
			s.anchors[n.Name.GetToken().Value] = size
		}
		return size
	case *ast.AliasNode:
		s.aliased = true
		if n.Value == nil {
			return 4
		}
		return s.anchors[n.Value.GetToken().Value]
	case *ast.CommentGroupNode:
		return 0
	}
	if t := n.GetToken(); t != nil {
		return s.add(len(t.Value), 2)
	}
	return 4
}

// oneLine keeps the first line of a parser message: its source excerpt spans several lines
// and repeats what the error names by line and column.
func oneLine(s string) string {
	s, _, _ = strings.Cut(strings.TrimSpace(s), "\n")
	return s
}
