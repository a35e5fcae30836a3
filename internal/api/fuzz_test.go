package api

import (
	"testing"

	"github.com/proliferate-ai/sandbox-mcp/apitype"
	"github.com/proliferate-ai/sandbox-mcp/internal/fault"
)

// FuzzDecodeStartRequest: any body decodes to a value or a 400 *Error, never a panic.
func FuzzDecodeStartRequest(f *testing.F) {
	for _, s := range []string{`{"name":"web","command":"npm run dev"}`, `{"name":1}`, `[]`, `{"readiness":{"tcp":3000}}`, `{"env":{"A":"b"}}`, "\x00", `{"maxRestarts":-1e400}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		var req apitype.StartServiceRequest
		if err := decodeJSON(body, &req); err != nil {
			if e, ok := err.(*fault.Error); !ok || e.Status != 400 {
				t.Fatalf("decodeJSON(%q) = %v, want a 400 *Error", body, err)
			}
		}
	})
}
