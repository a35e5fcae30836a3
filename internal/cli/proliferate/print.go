package proliferate

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
)

// printJSON writes body as one line of compact JSON; a body that is not JSON
// is written as it is.
func printJSON(w io.Writer, body []byte) error {
	var buf bytes.Buffer
	if err := json.Compact(&buf, body); err != nil {
		buf.Reset()
		buf.Write(bytes.TrimSpace(body))
	}
	buf.WriteByte('\n')
	_, err := w.Write(buf.Bytes())
	return err
}

// printValue writes v as one line of compact JSON.
func printValue(w io.Writer, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("encode output: %w", err)
	}
	return printJSON(w, b)
}

// isTerminal reports whether w is a character device, for progress output.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}
