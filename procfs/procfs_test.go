package procfs

import (
	"os"
	"syscall"
	"testing"

	"github.com/google/go-cmp/cmp"
	"golang.org/x/sys/unix"
)

func TestParseStat(t *testing.T) {
	tail := " 0 0 0 0 0 0 0 0 0 0 0 0 987654 1 2 3" // fields 10-21, then 22 (start)
	tests := []struct {
		name    string
		in      string
		want    Stat
		wantErr bool
	}{
		{"plain", "1234 (bash) S 1 1234 1200 34816 1234 4194560" + tail,
			Stat{Comm: "bash", State: 'S', PPID: 1, PGID: 1234, Session: 1200, Start: 987654}, false},
		{"name with ) and spaces", "77 (we) ird (na me)) R 5 6 7 8 9 10" + tail,
			Stat{Comm: "we) ird (na me)", State: 'R', PPID: 5, PGID: 6, Session: 7, Start: 987654}, false},
		{"zombie", "9 (x) Z 1 9 9 0 -1 0" + tail, Stat{Comm: "x", State: 'Z', PPID: 1, PGID: 9, Session: 9, Start: 987654}, false},
		{"too few fields", "1234 (bash) S 1 1234 1234", Stat{}, true},
		{"no name", "1234 bash S 1 1234 1234" + tail, Stat{}, true},
		{"bad pgid", "1234 (bash) S 1 x 1234 0 0 0" + tail, Stat{}, true},
		{"state of two bytes", "1234 (bash) SS 1 1 1 0 0 0" + tail, Stat{}, true},
		{"empty", "", Stat{}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseStat([]byte(tt.in))
			if (err != nil) != tt.wantErr {
				t.Fatalf("ParseStat(%q) error = %v, want error %v", tt.in, err, tt.wantErr)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("ParseStat(%q) (-want +got):\n%s", tt.in, diff)
			}
		})
	}
}

// ReadStat of this process agrees with what the kernel says through syscalls.
func TestReadStatSelf(t *testing.T) {
	st, err := ReadStat(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	sid, _ := unix.Getsid(0)
	if st.PPID != os.Getppid() || st.PGID != syscall.Getpgrp() || st.Session != sid || st.Start == 0 || st.State != 'R' && st.State != 'S' {
		t.Errorf("ReadStat(self) = %+v; want ppid %d, pgid %d, session %d, a start time", st, os.Getppid(), syscall.Getpgrp(), sid)
	}
	if _, err := ReadStat(1 << 30); err == nil {
		t.Error("ReadStat of a pid that cannot exist succeeded")
	}
}

// FuzzParseStat: any content parses or fails cleanly; what parses has a
// one-byte state and a name taken from inside the parentheses.
func FuzzParseStat(f *testing.F) {
	f.Add([]byte("1234 (bash) S 1 1234 1234 34816 1234 4194560 0 0 0 0 0 0 0 0 0 0 0 0 0 0 5 0 0"))
	f.Add([]byte("77 (we) ird (name)) R 5 6 7 8"))
	f.Add([]byte(")("))
	f.Fuzz(func(t *testing.T, b []byte) {
		st, err := ParseStat(b)
		if err != nil {
			return
		}
		if st.State == 0 || len(st.Comm) > len(b) {
			t.Fatalf("ParseStat(%q) = %+v", b, st)
		}
	})
}
