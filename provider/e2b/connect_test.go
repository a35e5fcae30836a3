package e2b

import (
	"bytes"
	"encoding/json"
	"testing"

	"github.com/proliferate-ai/sandbox-mcp/provider/e2b/e2bwire"
)

func TestDecodeConnectError(t *testing.T) {
	tests := []struct {
		status   int
		body     string
		wantCode string
	}{
		{404, `{"code":"not_found","message":"x"}`, e2bwire.CodeNotFound},
		{401, `<html>no</html>`, e2bwire.CodeUnauthenticated},
		{502, ``, e2bwire.CodeUnavailable},
		{500, `{"message":"no code"}`, e2bwire.CodeUnknown},
	}
	for _, tt := range tests {
		if got := DecodeConnectError(tt.status, []byte(tt.body)); got.Code != tt.wantCode || got.Message == "" {
			t.Errorf("DecodeConnectError(%d, %q) = %+v, want code %s and a message", tt.status, tt.body, got, tt.wantCode)
		}
	}
	for _, code := range []string{e2bwire.CodeNotFound, e2bwire.CodeInvalidArgument, e2bwire.CodeUnauthenticated, e2bwire.CodeUnavailable, e2bwire.CodeAlreadyExists} {
		ce := &e2bwire.ConnectError{Code: code}
		if back := e2bwire.CodeForHTTPStatus(ce.HTTPStatus()); code != e2bwire.CodeAlreadyExists && back != code {
			t.Errorf("CodeForHTTPStatus(HTTPStatus(%s)) = %s", code, back)
		}
	}
}

// FuzzDecodeStream: untrusted stream payloads never panic the decoders.
func FuzzDecodeStream(f *testing.F) {
	f.Add([]byte(`{"event":{"data":{"stdout":"aGk="}}}`))
	f.Add([]byte(`{"error":{"code":"internal"}}`))
	f.Add([]byte(`{"event":{"end":{"exitCode":-1,"error":"x"}}}`))
	f.Fuzz(func(t *testing.T, in []byte) {
		_, _, _ = readEvent(bytes.NewReader(envelope(0, string(in))))
		_, _, _ = readEvent(bytes.NewReader(envelope(e2bwire.FlagEndStream, string(in))))
		_ = e2bwire.ParseEndStream(in)
		_ = DecodeConnectError(400, in)
		_ = DecodeAPIError(400, in)
		// What the local server decodes from clients.
		for _, v := range []any{new(e2bwire.EntryInfo), new(e2bwire.StartRequest), new(e2bwire.SendSignalRequest), new(e2bwire.SendInputRequest),
			new(e2bwire.ListDirRequest), new(e2bwire.NewSandbox), new(e2bwire.ConnectRequest)} {
			_ = json.Unmarshal(in, v)
		}
	})
}

func envelope(flags byte, data string) []byte {
	var b bytes.Buffer
	if err := e2bwire.WriteEnvelope(&b, flags, []byte(data)); err != nil {
		panic(err)
	}
	return b.Bytes()
}
