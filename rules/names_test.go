package rules

import (
	"errors"
	"strings"
	"testing"
)

func TestValidateName(t *testing.T) {
	tests := []struct {
		name string
		ok   bool
	}{
		{"web", true},
		{"a.b_c-D9", true},
		{strings.Repeat("x", MaxNameLen), true},
		{strings.Repeat("x", MaxNameLen+1), false},
		{strings.Repeat("x", 100), false},
		{"", false},
		{".", false},
		{"..", false},
		{"..x", true},
		{"a/b", false},
		{"a b", false},
		{"é", false},
		{"a\x00", false},
	}
	for _, tt := range tests {
		err := ValidateName(tt.name)
		if (err == nil) != tt.ok {
			t.Errorf("ValidateName(%q) = %v, want ok=%v", tt.name, err, tt.ok)
		}
		if err != nil && !errors.Is(err, ErrInvalidName) {
			t.Errorf("ValidateName(%q) = %v, want it to match ErrInvalidName", tt.name, err)
		}
		if ValidName(tt.name) != tt.ok {
			t.Errorf("ValidName(%q) = %v, want %v", tt.name, !tt.ok, tt.ok)
		}
	}
}

func TestMessages(t *testing.T) {
	if got, want := ServiceNotFound(`we"b`), `Service "we\"b" not found`; got != want {
		t.Errorf("ServiceNotFound = %q, want %q", got, want)
	}
	if got, want := NoLogs("web"), `No logs found for service "web"`; got != want {
		t.Errorf("NoLogs = %q, want %q", got, want)
	}
}

func TestFallbackPortsIsACopy(t *testing.T) {
	a := FallbackPorts()
	a[0] = 1
	if FallbackPorts()[0] != 3000 {
		t.Errorf("FallbackPorts()[0] = %d after a caller changed its copy, want 3000", FallbackPorts()[0])
	}
}

func FuzzValidateName(f *testing.F) {
	for _, s := range []string{"web", "..", strings.Repeat("y", 65), "a/b"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		err := ValidateName(s)
		if err != nil {
			return
		}
		if len(s) == 0 || len(s) > MaxNameLen || s == "." || s == ".." || strings.ContainsAny(s, "/\x00 ") {
			t.Errorf("ValidateName(%q) = nil for a name that cannot be a file name", s)
		}
	})
}

func TestValidateVolumeName(t *testing.T) {
	tests := []struct {
		name string
		ok   bool
	}{
		{"data", true},
		{"session-1.ws_2", true},
		{"9lives", true},
		{strings.Repeat("a", MaxVolumeNameLen), true},
		{strings.Repeat("a", MaxVolumeNameLen+1), false},
		{"", false},
		{".hidden", false},
		{"-flag", false},
		{"_x", false},
		{"a/b", false},
		{"..", false},
		{"a b", false},
		{"a\x00", false},
		{"é", false},
	}
	for _, tt := range tests {
		if err := ValidateVolumeName(tt.name); (err == nil) != tt.ok {
			t.Errorf("ValidateVolumeName(%q) = %v, want ok %v", tt.name, err, tt.ok)
		}
	}
}
