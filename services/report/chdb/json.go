package chdb

import (
	"errors"
	"fmt"
	"strconv"
	"unicode/utf16"
	"unicode/utf8"
)

// A minimal JSON reader for result rows that, unlike encoding/json, keeps the bytes of
// strings that are not valid UTF-8 (ClickHouse strings are bytes and are output as is).

// splitArray returns the raw elements of a JSON array.
func splitArray(b []byte) ([][]byte, error) {
	i := skipSpace(b, 0)
	if i >= len(b) || b[i] != '[' {
		return nil, errors.New("json: want an array")
	}
	i = skipSpace(b, i+1)
	var out [][]byte
	if i < len(b) && b[i] == ']' {
		return out, nil
	}
	for {
		j, err := skipValue(b, i)
		if err != nil {
			return nil, err
		}
		out = append(out, b[i:j])
		i = skipSpace(b, j)
		if i >= len(b) {
			return nil, errors.New("json: unterminated array")
		}
		if b[i] == ']' {
			return out, nil
		}
		if b[i] != ',' {
			return nil, fmt.Errorf("json: unexpected %q in array", b[i])
		}
		i = skipSpace(b, i+1)
	}
}

func skipSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

// skipValue returns the index just past the value starting at b[i].
func skipValue(b []byte, i int) (int, error) {
	if i >= len(b) {
		return 0, errors.New("json: missing value")
	}
	switch b[i] {
	case '"':
		for j := i + 1; j < len(b); j++ {
			switch b[j] {
			case '\\':
				j++
			case '"':
				return j + 1, nil
			}
		}
		return 0, errors.New("json: unterminated string")
	case '[', '{':
		depth := 0
		for j := i; j < len(b); j++ {
			switch b[j] {
			case '"':
				k, err := skipValue(b, j)
				if err != nil {
					return 0, err
				}
				j = k - 1
			case '[', '{':
				depth++
			case ']', '}':
				depth--
				if depth == 0 {
					return j + 1, nil
				}
			}
		}
		return 0, errors.New("json: unterminated array or object")
	}
	j := i
	for j < len(b) && b[j] != ',' && b[j] != ']' && b[j] != '}' && b[j] != ' ' && b[j] != '\n' {
		j++
	}
	if j == i {
		return 0, fmt.Errorf("json: unexpected %q", b[i])
	}
	return j, nil
}

// decodeString decodes a JSON string literal, keeping raw bytes as they are.
func decodeString(b []byte) (string, error) {
	if len(b) < 2 || b[0] != '"' || b[len(b)-1] != '"' {
		return "", fmt.Errorf("json: want a string, got %.40q", b)
	}
	b = b[1 : len(b)-1]
	out := make([]byte, 0, len(b))
	for i := 0; i < len(b); i++ {
		c := b[i]
		if c != '\\' {
			out = append(out, c)
			continue
		}
		i++
		if i >= len(b) {
			return "", errors.New("json: bad escape")
		}
		switch b[i] {
		case '"', '\\', '/':
			out = append(out, b[i])
		case 'b':
			out = append(out, '\b')
		case 'f':
			out = append(out, '\f')
		case 'n':
			out = append(out, '\n')
		case 'r':
			out = append(out, '\r')
		case 't':
			out = append(out, '\t')
		case 'u':
			r, n, err := readU(b, i+1)
			if err != nil {
				return "", err
			}
			i += n
			if utf16.IsSurrogate(r) && i+2 < len(b) && b[i+1] == '\\' && b[i+2] == 'u' {
				r2, n2, err := readU(b, i+3)
				if err == nil {
					if d := utf16.DecodeRune(r, r2); d != utf8.RuneError {
						r = d
						i += 2 + n2
					}
				}
			}
			out = utf8.AppendRune(out, r)
		default:
			return "", fmt.Errorf("json: bad escape \\%c", b[i])
		}
	}
	return string(out), nil
}

func readU(b []byte, i int) (rune, int, error) {
	if i+4 > len(b) {
		return 0, 0, errors.New("json: short \\u escape")
	}
	v, err := strconv.ParseUint(string(b[i:i+4]), 16, 32)
	if err != nil {
		return 0, 0, fmt.Errorf("json: bad \\u escape: %w", err)
	}
	return rune(v), 4, nil
}
