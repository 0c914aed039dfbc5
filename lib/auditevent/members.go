package auditevent

// Members of an audit event: strings, string lists, the user, the object reference and the
// response status, each read field by field from the scanner.

import (
	"fmt"
	"strconv"
)

// strField reads a string into dst; null leaves dst unchanged.
func (s *scanner) strField(dst *string, prefix, name string) error {
	switch c := s.peek(); c {
	case '"':
		v, err := s.str()
		if err != nil {
			return err
		}
		*dst = v
		return nil
	case 'n':
		return s.literal("null")
	default:
		if _, err := s.skip(1); err != nil {
			return err
		}
		return typeError(prefix+name, c, "a string")
	}
}

// strSlice reads an array of strings into dst, reusing the backing array in *buf; null
// sets dst to nil and a null element reads as "".
func (s *scanner) strSlice(dst *[]string, buf *[]string, field string) error {
	if null, err := s.isNull(); null || err != nil {
		*dst = nil
		return err
	}
	if c := s.peek(); c != '[' {
		return typeError(field, c, "an array")
	}
	out := (*buf)[:0]
	more, err := s.arrBegin(2)
	for more && err == nil {
		var v string
		if err = s.strField(&v, field, " element"); err != nil {
			break
		}
		out = append(out, v)
		more, err = s.arrNext()
	}
	*buf = out
	if out == nil {
		out = []string{}
	}
	*dst = out
	return err
}

var userFields = []string{"", "username", "uid", "groups"}

func (s *scanner) userInfo(u *UserInfo, groups *[]string, field string) error {
	if c := s.peek(); c != '{' {
		return typeError(field, c, "an object")
	}
	more, err := s.objBegin(2)
	for more && err == nil {
		var k string
		if k, err = s.objKey(); err != nil {
			break
		}
		if err = s.userMember(u, groups, field, k); err != nil {
			break
		}
		more, err = s.objNext()
	}
	return err
}

func (s *scanner) userMember(u *UserInfo, groups *[]string, field, k string) error {
	{
		f := 0
		switch k {
		case "username":
			f = 1
		case "uid":
			f = 2
		case "groups":
			f = 3
		case "extra":
		default:
			f = foldField(k, userFields)
		}
		switch f {
		case 1:
			return s.strField(&u.Username, field, ".username")
		case 2:
			return s.strField(&u.UID, field, ".uid")
		case 3:
			return s.strSlice(&u.Groups, groups, field)
		}
		_, err := s.skip(2)
		return err
	}
}

var refFields = []string{"", "resource", "namespace", "name", "uid", "apiGroup", "apiVersion", "resourceVersion", "subresource"}

func (s *scanner) objectRef(r *ObjectRef) error {
	if c := s.peek(); c != '{' {
		return typeError("objectRef", c, "an object")
	}
	more, err := s.objBegin(2)
	for more && err == nil {
		var k string
		if k, err = s.objKey(); err != nil {
			break
		}
		if err = s.refMember(r, k); err != nil {
			break
		}
		more, err = s.objNext()
	}
	return err
}

func (s *scanner) refMember(r *ObjectRef, k string) error {
	{
		var dst *string
		switch k {
		case "resource":
			dst = &r.Resource
		case "namespace":
			dst = &r.Namespace
		case "name":
			dst = &r.Name
		case "uid":
			dst = &r.UID
		case "apiGroup":
			dst = &r.APIGroup
		case "apiVersion":
			dst = &r.APIVersion
		case "resourceVersion":
			dst = &r.ResourceVersion
		case "subresource":
			dst = &r.Subresource
		default:
			switch foldField(k, refFields) {
			case 1:
				dst = &r.Resource
			case 2:
				dst = &r.Namespace
			case 3:
				dst = &r.Name
			case 4:
				dst = &r.UID
			case 5:
				dst = &r.APIGroup
			case 6:
				dst = &r.APIVersion
			case 7:
				dst = &r.ResourceVersion
			case 8:
				dst = &r.Subresource
			default:
				_, err := s.skip(2)
				return err
			}
		}
		return s.strField(dst, "objectRef.", k)
	}
}

var statusFields = []string{"", "status", "message", "reason", "code"}

func (s *scanner) status(st *Status) error {
	if c := s.peek(); c != '{' {
		return typeError("responseStatus", c, "an object")
	}
	more, err := s.objBegin(2)
	for more && err == nil {
		var k string
		if k, err = s.objKey(); err != nil {
			break
		}
		if err = s.statusMember(st, k); err != nil {
			break
		}
		more, err = s.objNext()
	}
	return err
}

func (s *scanner) statusMember(st *Status, k string) error {
	{
		f := 0
		switch k {
		case "status":
			f = 1
		case "message":
			f = 2
		case "reason":
			f = 3
		case "code":
			f = 4
		case "details":
			raw, err := s.skip(2)
			st.Details = raw
			return err
		case "metadata", "kind", "apiVersion":
		default:
			f = foldField(k, statusFields)
		}
		switch f {
		case 1:
			return s.strField(&st.Status, "responseStatus", ".status")
		case 2:
			return s.strField(&st.Message, "responseStatus", ".message")
		case 3:
			return s.strField(&st.Reason, "responseStatus", ".reason")
		case 4:
			c := s.peek()
			if c == 'n' {
				return s.literal("null")
			}
			if c != '-' && (c < '0' || c > '9') {
				if _, err := s.skip(2); err != nil {
					return err
				}
				return typeError("responseStatus.code", c, "an integer")
			}
			num, err := s.number()
			if err != nil {
				return err
			}
			n, err := strconv.ParseInt(b2s(num), 10, 32)
			if err != nil {
				return fmt.Errorf("%w: responseStatus.code %s is not an int32", ErrNotAuditEvent, num)
			}
			st.Code = int32(n)
			return nil
		}
		_, err := s.skip(2)
		return err
	}
}
