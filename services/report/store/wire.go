package store

import (
	"fmt"

	"google.golang.org/protobuf/encoding/protowire"
)

// wireReader reads protobuf wire format with the checks proto.Unmarshal makes; the values it
// returns share data's memory.
type wireReader struct{ s []byte }

func (r *wireReader) done() bool { return len(r.s) == 0 }

func (r *wireReader) varint() (uint64, error) {
	v, n := protowire.ConsumeVarint(r.s)
	if n < 0 {
		return 0, protowire.ParseError(n)
	}
	r.s = r.s[n:]
	return v, nil
}

// tag reads a field number (1 to 2^29-1) and a wire type.
func (r *wireReader) tag() (protowire.Number, protowire.Type, error) {
	num, typ, n := protowire.ConsumeTag(r.s)
	if n < 0 {
		return 0, 0, protowire.ParseError(n)
	}
	if num > protowire.MaxValidNumber {
		return 0, 0, fmt.Errorf("invalid protobuf field number %d", num)
	}
	r.s = r.s[n:]
	return num, typ, nil
}

func (r *wireReader) bytes() ([]byte, error) {
	v, n := protowire.ConsumeBytes(r.s)
	if n < 0 {
		return nil, protowire.ParseError(n)
	}
	r.s = r.s[n:]
	return v[:len(v):len(v)], nil
}

// skip passes over the value of a field the decoder does not keep.
func (r *wireReader) skip(num protowire.Number, typ protowire.Type) error {
	n := protowire.ConsumeFieldValue(num, typ, r.s)
	if n < 0 {
		return protowire.ParseError(n)
	}
	r.s = r.s[n:]
	return nil
}
