package scan

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
)

// maxDocument caps a pretty-printed JSON document read whole (aws logs filter-log-events
// output, gcloud logging read --format=json).
const maxDocument = 512 << 20

// decode reads one line, file or document: an audit Event, an EventList, or a cloud
// envelope (lib/envelope) holding any number of events (each passed to w.event). Records of
// an envelope that hold no audit event are counted, not reported as bad.
func (w *worker) decode(data []byte) error {
	st, err := w.env.Decode(w.dec, data, w.event)
	for r, n := range st.Reasons {
		w.skipped[r] += n
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

// readDocument reads a pretty-printed document whole.
func readDocument(name string, br *bufio.Reader) ([]byte, error) {
	data, err := io.ReadAll(io.LimitReader(br, maxDocument+1))
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", name, err)
	}
	if len(data) > maxDocument {
		return nil, fmt.Errorf("%s: a JSON document over %d MiB: split it into lines", name, maxDocument>>20)
	}
	return data, nil
}
