package e2bwire

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func envelope(flags byte, data string) []byte {
	var b bytes.Buffer
	if err := WriteEnvelope(&b, flags, []byte(data)); err != nil {
		panic(err)
	}
	return b.Bytes()
}

func TestReadEnvelope(t *testing.T) {
	tests := []struct {
		name    string
		in      []byte
		want    Envelope
		wantErr error
	}{
		{"message", envelope(0, `{"a":1}`), Envelope{Flags: 0, Data: []byte(`{"a":1}`)}, nil},
		{"end of stream", envelope(FlagEndStream, `{}`), Envelope{Flags: FlagEndStream, Data: []byte(`{}`)}, nil},
		{"empty message", envelope(0, ""), Envelope{Data: []byte{}}, nil},
		{"clean end", nil, Envelope{}, io.EOF},
		{"short header", []byte{0, 0, 0}, Envelope{}, io.ErrUnexpectedEOF},
		{"short body", []byte{0, 0, 0, 0, 5, 'a'}, Envelope{}, io.ErrUnexpectedEOF},
		{"header only", []byte{0, 0, 0, 0, 5}, Envelope{}, io.ErrUnexpectedEOF},
		{"too large", []byte{0, 0xff, 0xff, 0xff, 0xff}, Envelope{}, ErrEnvelopeTooLarge},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ReadEnvelope(bytes.NewReader(tt.in))
			if !errors.Is(err, tt.wantErr) {
				t.Fatalf("ReadEnvelope(%q) error = %v, want %v", tt.in, err, tt.wantErr)
			}
			if diff := cmp.Diff(tt.want, got); err == nil && diff != "" {
				t.Errorf("ReadEnvelope(%q) (-want +got):\n%s", tt.in, diff)
			}
		})
	}
	if _, err := ReadEnvelope(bytes.NewReader(envelope(FlagCompressed, "x"))); err == nil {
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
		{`{"error":{"code":"not_found","message":"process with pid 3 not found"}}`, CodeNotFound},
		{`{"error":{"message":"no code"}}`, CodeUnknown},
	}
	for _, tt := range tests {
		err := ParseEndStream([]byte(tt.in))
		var ce *ConnectError
		switch {
		case tt.wantCode == "" && err != nil:
			t.Errorf("ParseEndStream(%q) = %v, want nil", tt.in, err)
		case tt.wantCode != "" && (!errors.As(err, &ce) || ce.Code != tt.wantCode):
			t.Errorf("ParseEndStream(%q) = %v, want code %s", tt.in, err, tt.wantCode)
		}
	}
	if err := ParseEndStream([]byte(`{`)); err == nil || errors.As(err, new(*ConnectError)) {
		t.Errorf("ParseEndStream(invalid JSON) = %v, want a decode error", err)
	}
}

func TestProcessEventJSON(t *testing.T) {
	// The protobuf JSON mapping: camelCase names, bytes as base64, omitted zero values.
	in := `{"event":{"data":{"stdout":"aGVsbG8K"}}}`
	var sr StreamResponse
	if err := json.Unmarshal([]byte(in), &sr); err != nil {
		t.Fatal(err)
	}
	if sr.Event.Data == nil || string(sr.Event.Data.Stdout) != "hello\n" {
		t.Errorf("decode %s = %+v, want stdout hello", in, sr.Event)
	}
	in = `{"event":{"end":{"exitCode":3,"exited":true,"status":"exit status 3"}}}`
	sr = StreamResponse{}
	if err := json.Unmarshal([]byte(in), &sr); err != nil || sr.Event.End == nil || sr.Event.End.ExitCode != 3 {
		t.Errorf("decode %s = %+v, %v", in, sr.Event.End, err)
	}
	var e EntryInfo
	if err := json.Unmarshal([]byte(`{"name":"a","type":"FILE_TYPE_FILE","path":"/a","size":"12"}`), &e); err != nil || e.Size != 12 {
		t.Errorf("decode entry with string size = %+v, %v", e, err)
	}
	if err := json.Unmarshal([]byte(`{"size":13}`), &e); err != nil || e.Size != 13 {
		t.Errorf("decode entry with number size = %+v, %v", e, err)
	}
	var sig Signal
	if err := json.Unmarshal([]byte(`9`), &sig); err != nil || sig != SignalSIGKILL {
		t.Errorf("decode signal 9 = %q, %v", sig, err)
	}
}

// FuzzReadEnvelope: any byte stream either fails or yields envelopes that encode back
// to the bytes they were read from.
func FuzzReadEnvelope(f *testing.F) {
	f.Add(envelope(0, `{"event":{"start":{"pid":1}}}`))
	f.Add(append(envelope(0, "a"), envelope(FlagEndStream, "{}")...))
	f.Add([]byte{0, 0xff, 0xff, 0xff, 0xff})
	f.Add([]byte{2, 0, 0, 0})
	f.Fuzz(func(t *testing.T, in []byte) {
		r := bytes.NewReader(in)
		consumed := 0
		for i := 0; i < 64; i++ {
			e, err := ReadEnvelope(r)
			if err != nil {
				return
			}
			var b bytes.Buffer
			if err := WriteEnvelope(&b, e.Flags, e.Data); err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(b.Bytes(), in[consumed:consumed+b.Len()]) {
				t.Fatalf("re-encoded envelope %q differs from input %q", b.Bytes(), in[consumed:consumed+b.Len()])
			}
			consumed += b.Len()
		}
	})
}
