package scan

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"maps"
	"slices"

	"github.com/auditlens/auditlens/lib/envelope"
)

// maxDocument caps a pretty-printed JSON document read whole (aws logs filter-log-events
// output, gcloud logging read --format=json).
const maxDocument = 512 << 20

// managed is what scan keeps for the cloud envelopes (lib/envelope) a line may hold.
type managed struct {
	env     *envelope.Decoder
	skipped map[string]int // records without audit events, by reason
}

// decode reads one line, file or document: an audit Event, an EventList, or a cloud
// envelope holding any number of events (each passed to s.event). Records of an envelope
// that hold no audit event are counted, not reported as bad.
func (s *scanner) decode(data []byte) error {
	if s.managed.env == nil {
		s.managed.env = envelope.NewDecoder(0)
	}
	st, err := s.managed.env.Decode(s.dec, data, s.event)
	for r, n := range st.Reasons {
		if s.managed.skipped == nil {
			s.managed.skipped = map[string]int{}
		}
		s.managed.skipped[r] += n
	}
	return err
}

// document reports whether br starts with a pretty-printed JSON document (a line holding
// only "{" or "["), which is read whole instead of line by line.
func document(br *bufio.Reader) bool {
	head, _ := br.Peek(4096)
	head = bytes.TrimLeft(head, " \t\r\n")
	if len(head) == 0 || (head[0] != '{' && head[0] != '[') {
		return false
	}
	line, _, _ := bytes.Cut(head[1:], []byte{'\n'})
	return len(bytes.TrimSpace(line)) == 0
}

// readDocument classifies a pretty-printed document as one input.
func (s *scanner) readDocument(name string, br *bufio.Reader) error {
	data, err := io.ReadAll(io.LimitReader(br, maxDocument+1))
	if err != nil {
		return fmt.Errorf("read %s: %w", name, err)
	}
	if len(data) > maxDocument {
		return fmt.Errorf("%s: a JSON document over %d MiB: split it into lines", name, maxDocument>>20)
	}
	s.pos = name
	s.line(data)
	return nil
}

// writeSkipped adds the envelope records without audit events to the summary.
func (s *scanner) writeSkipped(w io.Writer) {
	for _, r := range slices.Sorted(maps.Keys(s.managed.skipped)) {
		fmt.Fprintf(w, "  envelope records without audit events, %s: %d (skipped)\n", r, s.managed.skipped[r])
	}
}
