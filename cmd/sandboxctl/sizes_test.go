package main

import (
	"strings"
	"testing"

	"github.com/proliferate-ai/sandbox-mcp/provider/engine"
)

func TestParseSize(t *testing.T) {
	tests := []struct {
		in   string
		want int64 // 0: an error
	}{
		{"512M", 512 << 20},
		{"512m", 512 << 20},
		{"2G", 2 << 30},
		{"2GiB", 2 << 30},
		{"2Gi", 2 << 30},
		{"2gb", 2 << 30},
		{"1.5G", 3 << 29},
		{"1T", 1 << 40},
		{"64K", 64 << 10},
		{"1048576", 1 << 20},
		{"100B", 100},
		{"", 0},
		{"M", 0},
		{"-1G", 0},
		{"0", 0},
		{"0.1", 0},
		{"1X", 0},
		{"1GG", 0},
		{"1bb", 0},
		{"1e3M", 0},
		{"0x10M", 0},
		{"NaN", 0},
		{"InfG", 0},
		{"9999999999T", 0},
		{"1 G", 0},
	}
	for _, tt := range tests {
		got, err := parseSize(tt.in)
		if tt.want == 0 {
			if err == nil {
				t.Errorf("parseSize(%q) = %d, want an error", tt.in, got)
			}
			continue
		}
		if err != nil || got != tt.want {
			t.Errorf("parseSize(%q) = %d, %v, want %d", tt.in, got, err, tt.want)
		}
	}
}

func TestParseCPUs(t *testing.T) {
	tests := []struct {
		in   string
		want int64 // 0: an error
	}{
		{"1", 1000},
		{"1.5", 1500},
		{"0.25", 250},
		{"0.001", 1},
		{"2.0005", 2001},
		{"4096", 4096000},
		{"0", 0},
		{"-1", 0},
		{"0.0004", 0},
		{"4097", 0},
		{"", 0},
		{"one", 0},
		{"1e3", 0},
		{"NaN", 0},
		{"Inf", 0},
	}
	for _, tt := range tests {
		got, err := parseCPUs(tt.in)
		if tt.want == 0 {
			if err == nil {
				t.Errorf("parseCPUs(%q) = %d, want an error", tt.in, got)
			}
			continue
		}
		if err != nil || got != tt.want {
			t.Errorf("parseCPUs(%q) = %d, %v, want %d", tt.in, got, err, tt.want)
		}
	}
}

func TestParseVolume(t *testing.T) {
	tests := []struct {
		in   string
		want engine.VolumeMount
		ok   bool
	}{
		{"data:/data", engine.VolumeMount{Name: "data", Target: "/data"}, true},
		{"cache:/home/user/.cache:ro", engine.VolumeMount{Name: "cache", Target: "/home/user/.cache", ReadOnly: true}, true},
		{"v1.2_x-y:/mnt/v:rw", engine.VolumeMount{Name: "v1.2_x-y", Target: "/mnt/v"}, true},
		{"data", engine.VolumeMount{}, false},
		{":/data", engine.VolumeMount{}, false},
		{"data:relative", engine.VolumeMount{}, false},
		{"data:/", engine.VolumeMount{}, false},
		{"data:/a/../b", engine.VolumeMount{}, false},
		{"data:/a/", engine.VolumeMount{}, false},
		{"data:/a:rx", engine.VolumeMount{}, false},
		{"data:/a:ro:x", engine.VolumeMount{}, false},
		{"-data:/a", engine.VolumeMount{}, false},
		{"da ta:/a", engine.VolumeMount{}, false},
		{"../x:/a", engine.VolumeMount{}, false},
		{strings.Repeat("v", 64) + ":/a", engine.VolumeMount{}, false},
	}
	for _, tt := range tests {
		got, err := parseVolume(tt.in)
		if (err == nil) != tt.ok || got != tt.want {
			t.Errorf("parseVolume(%q) = %+v, %v, want %+v (ok %v)", tt.in, got, err, tt.want, tt.ok)
		}
	}
}

// FuzzParseSize: an accepted size is positive, and its number times its unit.
func FuzzParseSize(f *testing.F) {
	for _, s := range []string{"512M", "2GiB", "1.5g", "100", "0", "-1K", "1e9T", "Inf"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		n, err := parseSize(s)
		if err == nil && n <= 0 {
			t.Errorf("parseSize(%q) = %d, want a positive size", s, n)
		}
	})
}

// FuzzParseCPUs: an accepted count is within (0, maxCPUs] CPUs.
func FuzzParseCPUs(f *testing.F) {
	for _, s := range []string{"1", "1.5", "0.0001", "4096", "-2", "NaN"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		m, err := parseCPUs(s)
		if err == nil && (m < 1 || m > maxCPUs*1000) {
			t.Errorf("parseCPUs(%q) = %d, out of range", s, m)
		}
	})
}

// FuzzParseVolume: an accepted volume has a valid name and an absolute, clean
// target, and prints back to an equivalent flag.
func FuzzParseVolume(f *testing.F) {
	for _, s := range []string{"data:/data", "c:/x:ro", "a:/b:rw", "::", "a:/", "a:b"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		v, err := parseVolume(s)
		if err != nil {
			return
		}
		if validVolumeName(v.Name) != nil || !strings.HasPrefix(v.Target, "/") {
			t.Fatalf("parseVolume(%q) = %+v: invalid", s, v)
		}
		flag := v.Name + ":" + v.Target
		if v.ReadOnly {
			flag += ":ro"
		}
		if again, err := parseVolume(flag); err != nil || again != v {
			t.Errorf("parseVolume(%q) = %+v, %v, want %+v", flag, again, err, v)
		}
	})
}
