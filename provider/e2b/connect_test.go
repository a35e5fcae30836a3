package e2b

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/proliferate-ai/sandbox-mcp/provider/e2b/e2bwire"
)

func envelope(flags byte, data string) []byte {
	var b bytes.Buffer
	if err := e2bwire.WriteEnvelope(&b, flags, []byte(data)); err != nil {
		panic(err)
	}
	return b.Bytes()
}

func TestReadEnvelope(t *testing.T) {
	tests := []struct {
		name    string
		in      []byte
		want    e2bwire.Envelope
		wantErr error
	}{
		{"message", envelope(0, `{"a":1}`), e2bwire.Envelope{Flags: 0, Data: []byte(`{"a":1}`)}, nil},
		{"end of stream", envelope(e2bwire.FlagEndStream, `{}`), e2bwire.Envelope{Flags: e2bwire.FlagEndStream, Data: []byte(`{}`)}, nil},
		{"empty message", envelope(0, ""), e2bwire.Envelope{Data: []byte{}}, nil},
		{"clean end", nil, e2bwire.Envelope{}, io.EOF},
		{"short header", []byte{0, 0, 0}, e2bwire.Envelope{}, io.ErrUnexpectedEOF},
		{"short body", []byte{0, 0, 0, 0, 5, 'a'}, e2bwire.Envelope{}, io.ErrUnexpectedEOF},
		{"header only", []byte{0, 0, 0, 0, 5}, e2bwire.Envelope{}, io.ErrUnexpectedEOF},
		{"too large", []byte{0, 0xff, 0xff, 0xff, 0xff}, e2bwire.Envelope{}, e2bwire.ErrEnvelopeTooLarge},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := e2bwire.ReadEnvelope(bytes.NewReader(tt.in))
			if !errors.Is(err, tt.wantErr) {
				t.Fatalf("ReadEnvelope(%q) error = %v, want %v", tt.in, err, tt.wantErr)
			}
			if diff := cmp.Diff(tt.want, got); err == nil && diff != "" {
				t.Errorf("ReadEnvelope(%q) (-want +got):\n%s", tt.in, diff)
			}
		})
	}
	if _, err := e2bwire.ReadEnvelope(bytes.NewReader(envelope(e2bwire.FlagCompressed, "x"))); err == nil {
		t.Error("ReadEnvelope(compressed) = nil error, want an error: no compression is negotiated")
	}
}

func TestParseEndStream(t *testing.T) {
	tests := []struct {
		in       string
		wantCode string // "" = no error
	}{
		{``, ""},
		{`{}`, ""},
		{`{"metadata":{"a":["b"]}}`, ""},
		{`{"error":{"code":"not_found","message":"process with pid 3 not found"}}`, e2bwire.CodeNotFound},
		{`{"error":{"message":"no code"}}`, e2bwire.CodeUnknown},
	}
	for _, tt := range tests {
		err := e2bwire.ParseEndStream([]byte(tt.in))
		var ce *e2bwire.ConnectError
		switch {
		case tt.wantCode == "" && err != nil:
			t.Errorf("ParseEndStream(%q) = %v, want nil", tt.in, err)
		case tt.wantCode != "" && (!errors.As(err, &ce) || ce.Code != tt.wantCode):
			t.Errorf("ParseEndStream(%q) = %v, want code %s", tt.in, err, tt.wantCode)
		}
	}
	if err := e2bwire.ParseEndStream([]byte(`{`)); err == nil || errors.As(err, new(*e2bwire.ConnectError)) {
		t.Errorf("ParseEndStream(invalid JSON) = %v, want a decode error", err)
	}
}

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

func TestProcessEventJSON(t *testing.T) {
	// The protobuf JSON mapping: camelCase names, bytes as base64, omitted zero values.
	in := `{"event":{"data":{"stdout":"aGVsbG8K"}}}`
	var sr e2bwire.StreamResponse
	if err := json.Unmarshal([]byte(in), &sr); err != nil {
		t.Fatal(err)
	}
	if sr.Event.Data == nil || string(sr.Event.Data.Stdout) != "hello\n" {
		t.Errorf("decode %s = %+v, want stdout hello", in, sr.Event)
	}
	in = `{"event":{"end":{"exitCode":3,"exited":true,"status":"exit status 3"}}}`
	sr = e2bwire.StreamResponse{}
	if err := json.Unmarshal([]byte(in), &sr); err != nil || sr.Event.End == nil || sr.Event.End.ExitCode != 3 {
		t.Errorf("decode %s = %+v, %v", in, sr.Event.End, err)
	}
	var e e2bwire.EntryInfo
	if err := json.Unmarshal([]byte(`{"name":"a","type":"FILE_TYPE_FILE","path":"/a","size":"12"}`), &e); err != nil || e.Size != 12 {
		t.Errorf("decode entry with string size = %+v, %v", e, err)
	}
	if err := json.Unmarshal([]byte(`{"size":13}`), &e); err != nil || e.Size != 13 {
		t.Errorf("decode entry with number size = %+v, %v", e, err)
	}
	var sig e2bwire.Signal
	if err := json.Unmarshal([]byte(`9`), &sig); err != nil || sig != e2bwire.SignalSIGKILL {
		t.Errorf("decode signal 9 = %q, %v", sig, err)
	}
}

// FuzzReadEnvelope: any byte stream either fails or yields envelopes that encode back
// to the bytes they were read from.
func FuzzReadEnvelope(f *testing.F) {
	f.Add(envelope(0, `{"event":{"start":{"pid":1}}}`))
	f.Add(append(envelope(0, "a"), envelope(e2bwire.FlagEndStream, "{}")...))
	f.Add([]byte{0, 0xff, 0xff, 0xff, 0xff})
	f.Add([]byte{2, 0, 0, 0})
	f.Fuzz(func(t *testing.T, in []byte) {
		r := bytes.NewReader(in)
		consumed := 0
		for i := 0; i < 64; i++ {
			e, err := e2bwire.ReadEnvelope(r)
			if err != nil {
				return
			}
			var b bytes.Buffer
			if err := e2bwire.WriteEnvelope(&b, e.Flags, e.Data); err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(b.Bytes(), in[consumed:consumed+b.Len()]) {
				t.Fatalf("re-encoded envelope %q differs from input %q", b.Bytes(), in[consumed:consumed+b.Len()])
			}
			consumed += b.Len()
		}
	})
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
