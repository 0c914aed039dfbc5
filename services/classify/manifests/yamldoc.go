package manifests

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

// Bounds of one YAML document, checked before it costs memory: the parser's memory grows with
// the square of the nesting depth, and aliases are expanded when a decoded document is turned
// into JSON, so a file of a few hundred bytes could otherwise take gigabytes.
const (
	// MaxDepth is the deepest nesting of collections accepted; a Kubernetes object, CRD
	// schemas included, stays far below it.
	MaxDepth = 1000
	// aliasGrowth and aliasSlack bound what aliases may add: a document may expand to
	// aliasGrowth times its own size plus aliasSlack bytes (and never past the decoded size).
	aliasGrowth = 4
	aliasSlack  = 1 << 20
)

// ErrTooDeep, ErrAliasExpansion and ErrTooLarge say why a document was refused.
var (
	ErrTooDeep        = errors.New("nested too deeply")
	ErrAliasExpansion = errors.New("aliases expand too much")
	ErrTooLarge       = errors.New("too large once decoded")
)

// decodeDocument decodes one YAML document (as cut by splitDocuments) into maps, slices and
// scalars, refusing first what would cost memory out of proportion to its size: nesting deeper
// than MaxDepth (checked on the tokens, before the parser), aliases that expand the document
// past aliasGrowth times its size plus aliasSlack, and a decoded size past maxSize bytes
// (counted on the syntax tree with each alias expanded, before anything is expanded).
func decodeDocument(data []byte, maxSize int) (any, error) {
	if d, line := flowDepth(data); d > MaxDepth {
		return nil, fmt.Errorf("%w: more than %d levels of brackets (line %d)", ErrTooDeep, MaxDepth, line)
	}
	tokens, err := tokenize(data)
	if err != nil {
		return nil, err
	}
	f, err := parser.Parse(tokens, 0)
	if err != nil {
		return nil, errors.New("parse: " + oneLine(yaml.FormatError(err, false, false)))
	}
	if len(f.Docs) == 0 || f.Docs[0].Body == nil {
		return nil, nil
	}
	if len(f.Docs) > 1 {
		return nil, errors.New("several documents where one was expected")
	}
	body := f.Docs[0].Body
	s := sizer{anchors: map[string]int{}, limit: maxSize + 1}
	size := s.size(body)
	aliasLimit := aliasGrowth*len(data) + aliasSlack
	switch {
	case s.aliased && size > aliasLimit && size > len(data):
		return nil, fmt.Errorf("%w: to more than %d bytes from %d (at most %d times the document plus %d)",
			ErrAliasExpansion, min(size, maxSize), len(data), aliasGrowth, aliasSlack)
	case size > maxSize:
		return nil, fmt.Errorf("%w: more than %d bytes (--max-document-size)", ErrTooLarge, maxSize)
	}
	var v any
	if err := yaml.NodeToValue(body, &v); err != nil {
		return nil, errors.New("parse: " + oneLine(yaml.FormatError(err, false, false)))
	}
	return v, nil
}

// tokenize cuts data into tokens as the parser's lexer does, measuring the nesting as it goes
// so that a document nested too deeply is refused after MaxDepth tokens, not after all of them
// (each token costs a few hundred bytes).
func tokenize(data []byte) (token.Tokens, error) {
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
			if n := d.add(t); n > MaxDepth {
				return nil, fmt.Errorf("%w: more than %d levels (line %d)", ErrTooDeep, MaxDepth, t.Position.Line)
			}
		}
		tokens.Add(sub...)
	}
}

// flowDepth reads data once, with no allocation, and returns how deep its flow collections
// ([...] and {...}) nest, stopping at the line where they pass MaxDepth: the lexer returns the
// tokens of a line at once, so a long line of brackets has to be refused before it. It skips
// quoted scalars, comments and the lines of block scalars (| and >), and in block context
// counts a bracket only where a value starts.
func flowDepth(data []byte) (deepest, line int) {
	flow, line := 0, 1
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
			if deepest > MaxDepth {
				return deepest, line
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
	return deepest, line
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
