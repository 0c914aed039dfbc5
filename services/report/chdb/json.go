package chdb

import (
	"errors"
	"fmt"
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
