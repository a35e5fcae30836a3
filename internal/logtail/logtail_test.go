package logtail

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/google/go-cmp/cmp"
	"go.uber.org/goleak"

	"github.com/proliferate-ai/sandbox-mcp/rules"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func newDir(t testing.TB, opts Options) *Dir {
	t.Helper()
	if opts.Dir == "" {
		opts.Dir = t.TempDir()
	}
	d, err := New(opts)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return d
}

func open(t *testing.T, d *Dir, name string) *Follower {
	t.Helper()
	f, err := d.Open(name)
	if err != nil {
		t.Fatalf("Open(%q): %v", name, err)
	}
	t.Cleanup(f.Close)
	return f
}

func appendFile(t testing.TB, path, s string) {
	t.Helper()
	fl, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer fl.Close()
	if _, err := fl.WriteString(s); err != nil {
		t.Fatal(err)
	}
}

// collect calls Next until it has n bytes of text.
func collect(t testing.TB, f *Follower, n int) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var sb strings.Builder
	for sb.Len() < n {
		s, err := f.Next(ctx)
		if err != nil {
			t.Fatalf("Next after %d of %d bytes: %v (have %q)", sb.Len(), n, err, sb.String())
		}
		if s == "" {
			t.Fatal("Next returned empty text")
		}
		sb.WriteString(s)
	}
	return sb.String()
}

// expectNothing checks that Next returns no text within d.
func expectNothing(t *testing.T, f *Follower, d time.Duration) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	if s, err := f.Next(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Next = %q, %v; want nothing (deadline exceeded)", s, err)
	}
}

func TestValidName(t *testing.T) {
	tests := []struct {
		name string
		want bool
	}{
		{"web", true},
		{"my-app_2.dev", true},
		{strings.Repeat("a", 64), true},
		{strings.Repeat("a", 65), false},
		{"", false},
		{".", false},
		{"..", false},
		{"../x", false},
		{"a/b", false},
		{"a b", false},
		{"é", false},
		{"a\x00", false},
		{"...", true},
	}
	for _, tt := range tests {
		if got := ValidName(tt.name); got != tt.want {
			t.Errorf("ValidName(%q) = %v, want %v", tt.name, got, tt.want)
		}
	}
}

func TestOpenErrors(t *testing.T) {
	d := newDir(t, Options{})
	if err := syscall.Mkfifo(filepath.Join(d.opts.Dir, "fifo.log"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(d.opts.Dir, "dir.log"), 0o755); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		want error
	}{
		{"../x", fs.ErrInvalid},
		{"", fs.ErrInvalid},
		{"a/b", fs.ErrInvalid},
		{"missing", fs.ErrNotExist},
		{"fifo", fs.ErrNotExist},
		{"dir", fs.ErrNotExist},
	}
	for _, tt := range tests {
		f, err := d.Open(tt.name)
		if !errors.Is(err, tt.want) {
			t.Errorf("Open(%q) error = %v, want %v", tt.name, err, tt.want)
		}
		if f != nil {
			f.Close()
		}
		if _, err := d.Tail(tt.name, 5); !errors.Is(err, tt.want) {
			t.Errorf("Tail(%q) error = %v, want %v", tt.name, err, tt.want)
		}
	}
	// A bad name is refused as everywhere else: rules.ValidateName's message.
	for _, name := range []string{"../x", "", strings.Repeat("a", 65)} {
		_, err := d.Tail(name, 5)
		if want := rules.ValidateName(name); !errors.Is(err, ErrInvalidName) || want == nil || err.Error() != want.Error() {
			t.Errorf("Tail(%q) error = %v, want ErrInvalidName with message %q", name, err, want)
		}
	}
}

func TestInitial(t *testing.T) {
	// 'é' is two bytes: an odd offset starts the window mid-character.
	long := strings.Repeat("é", 6000) + "end"
	tests := []struct {
		name     string
		rotated  string // <name>.log.1
		current  string // <name>.log
		want     string
		wantHeld bool
	}{
		{"empty", "", "", "", false},
		{"short", "", "hello\n", "hello\n", false},
		{"window starts mid character", "", long, long[len(long)-9999:], false},
		{"reaches into the rotated file", "old line\n", "new\n", "old line\nnew\n", false},
		{"rotated window cut", "ab" + long, "new\n", long[len(long)-9995:] + "new\n", false},
		{"incomplete last character held", "", "a€"[:3], "a", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := newDir(t, Options{})
			if tt.rotated != "" {
				appendFile(t, d.path("svc", 1), tt.rotated)
			}
			appendFile(t, d.path("svc", 0), tt.current)
			f := open(t, d, "svc")
			got := f.Initial()
			if got != tt.want {
				t.Errorf("Initial() = %d bytes %.40q..., want %d bytes %.40q...", len(got), got, len(tt.want), tt.want)
			}
			if len(got) > DefaultInitialBytes || !utf8.ValidString(got) {
				t.Errorf("Initial() is %d bytes, valid UTF-8 %v; want at most %d bytes of valid UTF-8", len(got), utf8.ValidString(got), DefaultInitialBytes)
			}
			if f.text.held() != tt.wantHeld {
				t.Errorf("held incomplete character = %v, want %v", f.text.held(), tt.wantHeld)
			}
		})
	}
}

func TestAppendDelivered(t *testing.T) {
	d := newDir(t, Options{})
	path := d.path("web", 0)
	appendFile(t, path, "first\n")
	f := open(t, d, "web")
	if got := f.Initial(); got != "first\n" {
		t.Fatalf("Initial() = %q, want %q", got, "first\n")
	}
	for i := range 20 {
		line := fmt.Sprintf("line %d ✓\n", i)
		appendFile(t, path, line)
		if got := collect(t, f, len(line)); got != line {
			t.Fatalf("Next = %q, want %q", got, line)
		}
	}
}

// TestCharacterWrittenInTwoHalves: a character whose halves are written 5 s
// apart arrives whole; nothing is released on a timer meanwhile.
func TestCharacterWrittenInTwoHalves(t *testing.T) {
	d := newDir(t, Options{PollInterval: 100 * time.Millisecond})
	path := d.path("web", 0)
	appendFile(t, path, "")
	f := open(t, d, "web")
	emoji := "🎉" // four bytes
	appendFile(t, path, "a"+emoji[:2])
	if got := collect(t, f, 1); got != "a" {
		t.Fatalf("Next = %q, want %q", got, "a")
	}
	expectNothing(t, f, 5*time.Second)
	appendFile(t, path, emoji[2:]+"b")
	if got := collect(t, f, len(emoji)+1); got != emoji+"b" {
		t.Fatalf("Next = %q, want %q", got, emoji+"b")
	}
}

// TestHeldCharacterReleased: held bytes are released, one U+FFFD each, when
// what follows cannot complete them: an invalid byte, a truncation, a rotation.
func TestHeldCharacterReleased(t *testing.T) {
	t.Run("invalid continuation", func(t *testing.T) {
		d := newDir(t, Options{})
		path := d.path("web", 0)
		appendFile(t, path, "")
		f := open(t, d, "web")
		appendFile(t, path, "x\xe2\x82")
		if got := collect(t, f, 1); got != "x" {
			t.Fatalf("Next = %q, want %q", got, "x")
		}
		appendFile(t, path, "\xffy")
		want := "\uFFFD\uFFFD\uFFFDy"
		if got := collect(t, f, len(want)); got != want {
			t.Fatalf("Next = %q, want %q", got, want)
		}
	})
	t.Run("truncation", func(t *testing.T) {
		d := newDir(t, Options{})
		path := d.path("web", 0)
		appendFile(t, path, "")
		f := open(t, d, "web")
		appendFile(t, path, "old output x\xe2\x82")
		collect(t, f, len("old output x"))
		if err := os.Truncate(path, 0); err != nil {
			t.Fatal(err)
		}
		appendFile(t, path, "\x82new\n")
		want := "\uFFFD\uFFFD" + "\uFFFDnew\n"
		if got := collect(t, f, len(want)); got != want {
			t.Fatalf("Next after truncation = %q, want %q", got, want)
		}
	})
	t.Run("rotation", func(t *testing.T) {
		d := newDir(t, Options{})
		path := d.path("web", 0)
		appendFile(t, path, "")
		f := open(t, d, "web")
		appendFile(t, path, "before x\xe2\x82")
		collect(t, f, len("before x"))
		if err := os.Rename(path, d.path("web", 1)); err != nil {
			t.Fatal(err)
		}
		appendFile(t, path, "\xacafter\n") // would complete € if it were glued on
		want := "\uFFFD\uFFFD" + "\uFFFDafter\n"
		if got := collect(t, f, len(want)); got != want {
			t.Fatalf("Next after rotation = %q, want %q", got, want)
		}
	})
}

func TestTruncation(t *testing.T) {
	d := newDir(t, Options{})
	path := d.path("web", 0)
	appendFile(t, path, "a long line of old output\n")
	f := open(t, d, "web")
	appendFile(t, path, "more old\n")
	collect(t, f, len("more old\n"))
	if err := os.Truncate(path, 0); err != nil {
		t.Fatal(err)
	}
	appendFile(t, path, "new\n")
	if got := collect(t, f, len("new\n")); got != "new\n" {
		t.Fatalf("Next after truncation = %q, want %q", got, "new\n")
	}
	appendFile(t, path, "newer\n")
	if got := collect(t, f, len("newer\n")); got != "newer\n" {
		t.Fatalf("Next = %q, want %q", got, "newer\n")
	}
}

func TestDeletedAndRecreated(t *testing.T) {
	d := newDir(t, Options{})
	path := d.path("web", 0)
	// Rotated files from before must not be replayed after the deletion.
	hourAgo := time.Now().Add(-time.Hour)
	for gen := 1; gen <= 2; gen++ {
		appendFile(t, d.path("web", gen), "ancient\n")
		if err := os.Chtimes(d.path("web", gen), hourAgo, hourAgo); err != nil {
			t.Fatal(err)
		}
	}
	appendFile(t, path, "old\n")
	f := open(t, d, "web")
	appendFile(t, path, "last words\n")
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	if got := collect(t, f, len("last words\n")); got != "last words\n" {
		t.Fatalf("Next = %q, want %q", got, "last words\n")
	}
	expectNothing(t, f, 50*time.Millisecond)
	appendFile(t, path, "reborn\n")
	if got := collect(t, f, len("reborn\n")); got != "reborn\n" {
		t.Fatalf("Next after re-creation = %q, want %q", got, "reborn\n")
	}
}

// rotWriter writes a log the way the service manager does: at limit bytes, or
// just past it at the end of a character, it renames .log.1 to .log.2 and
// .log to .log.1, then creates a new .log.
type rotWriter struct {
	d     *Dir
	name  string
	limit int
	size  int
	f     *os.File
	// beforeRotate, when set, runs before each rotation.
	beforeRotate func()
	rotations    int
}

func (w *rotWriter) write(t testing.TB, b []byte) {
	t.Helper()
	for len(b) > 0 {
		if w.f == nil {
			f, err := os.OpenFile(w.d.path(w.name, 0), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
			if err != nil {
				t.Fatal(err)
			}
			w.f = f
			fi, _ := f.Stat()
			w.size = int(fi.Size())
		}
		if w.size >= w.limit {
			w.rotate(t)
			continue
		}
		n := min(len(b), w.limit-w.size)
		for n < len(b) && n > 0 && isContinuation(b[n]) {
			n--
		}
		if n == 0 {
			for n = 1; n < len(b) && isContinuation(b[n]); n++ {
			}
		}
		if _, err := w.f.Write(b[:n]); err != nil {
			t.Fatal(err)
		}
		w.size += n
		b = b[n:]
	}
}

func (w *rotWriter) rotate(t testing.TB) {
	t.Helper()
	if w.beforeRotate != nil {
		w.beforeRotate()
	}
	_ = w.f.Close()
	if err := os.Rename(w.d.path(w.name, 1), w.d.path(w.name, 2)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		t.Fatal(err)
	}
	if err := os.Rename(w.d.path(w.name, 0), w.d.path(w.name, 1)); err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(w.d.path(w.name, 0), os.O_CREATE|os.O_EXCL|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	w.f, w.size = f, 0
	w.rotations++
}

func (w *rotWriter) close() {
	if w.f != nil {
		_ = w.f.Close()
	}
}

// logText is deterministic output with multi-byte characters, so rotation at
// a byte limit splits some of them between two files.
func logText(i int) string {
	return fmt.Sprintf("%05d héllo wörld ✓ 🎉 %s\n", i, strings.Repeat("x", i%37))
}

func TestRotationWhileBehind(t *testing.T) {
	d := newDir(t, Options{MaxChunk: 100})
	w := &rotWriter{d: d, name: "web", limit: 500}
	defer w.close()
	w.write(t, []byte("before\n"))
	f := open(t, d, "web")
	var want strings.Builder
	// The follower reads nothing while three rotations happen: the file it
	// holds open is rotated out of the chain, its successors are .log.2 and .log.1.
	for i := range 50 {
		s := logText(i)
		want.WriteString(s)
		w.write(t, []byte(s))
		if w.rotations == 3 {
			break
		}
	}
	if w.rotations != 3 {
		t.Fatalf("rotations = %d, want 3", w.rotations)
	}
	got := collect(t, f, want.Len())
	if diff := cmp.Diff(want.String(), got); diff != "" {
		t.Fatalf("followed text differs from written (-want +got):\n%s", diff)
	}
	expectNothing(t, f, 20*time.Millisecond)
}

func TestRotationWhileStreaming(t *testing.T) {
	d := newDir(t, Options{})
	var received atomic.Int64
	written := 0
	w := &rotWriter{d: d, name: "web", limit: 2048}
	defer w.close()
	// Rotate only when the follower is at most one file behind: a follower more
	// than two rotations behind has lost files it never opened.
	w.beforeRotate = func() {
		deadline := time.Now().Add(10 * time.Second)
		for received.Load() < int64(written-w.limit) && time.Now().Before(deadline) {
			time.Sleep(time.Millisecond)
		}
	}
	appendFile(t, d.path("web", 0), "")
	f := open(t, d, "web")

	var want strings.Builder
	for i := range 400 {
		want.WriteString(logText(i))
	}
	var got strings.Builder
	var wg sync.WaitGroup
	wg.Go(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		for got.Len() < want.Len() {
			s, err := f.Next(ctx)
			if err != nil {
				return
			}
			if !utf8.ValidString(s) {
				t.Errorf("Next = %q, not valid UTF-8", s)
			}
			got.WriteString(s)
			received.Store(int64(got.Len()))
		}
	})
	for i := range 400 {
		s := logText(i)
		written += len(s)
		w.write(t, []byte(s))
		if i%10 == 0 {
			time.Sleep(time.Millisecond)
		}
	}
	wg.Wait()
	if w.rotations < 5 {
		t.Errorf("rotations = %d, want several", w.rotations)
	}
	if diff := cmp.Diff(want.String(), got.String()); diff != "" {
		t.Fatalf("followed text differs from written across %d rotations (-want +got):\n%s", w.rotations, diff)
	}
}

func TestChunksBounded(t *testing.T) {
	const chunk = 1000
	d := newDir(t, Options{MaxChunk: chunk})
	path := d.path("web", 0)
	appendFile(t, path, "")
	f := open(t, d, "web")
	big := strings.Repeat("ab€🎉\n", 20000)
	appendFile(t, path, big)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var got strings.Builder
	for got.Len() < len(big) {
		s, err := f.Next(ctx)
		if err != nil {
			t.Fatalf("Next: %v", err)
		}
		if len(s) > chunk+utf8MaxLen || !utf8.ValidString(s) {
			t.Fatalf("Next = %d bytes, valid %v; want at most %d bytes of valid UTF-8", len(s), utf8.ValidString(s), chunk+utf8MaxLen)
		}
		got.WriteString(s)
	}
	if got.String() != big {
		t.Fatal("chunked text differs from the written text")
	}
}

func TestManyFollowersShareAndReleaseTheWatcher(t *testing.T) {
	d := newDir(t, Options{})
	var fs []*Follower
	for i := range 5 {
		name := fmt.Sprintf("svc%d", i%2)
		appendFile(t, d.path(name, 0), "")
		fs = append(fs, open(t, d, name))
	}
	appendFile(t, d.path("svc1", 0), "hi\n")
	for i := 1; i < 5; i += 2 {
		if got := collect(t, fs[i], 3); got != "hi\n" {
			t.Errorf("follower %d: Next = %q, want %q", i, got, "hi\n")
		}
	}
	for _, f := range fs {
		f.Close()
		f.Close()
	}
	if _, err := fs[0].Next(context.Background()); !errors.Is(err, ErrClosed) {
		t.Errorf("Next after Close = %v, want ErrClosed", err)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.watcher != nil || d.nsubs != 0 {
		t.Errorf("after closing every follower: watcher %v, %d subscribers; want none", d.watcher, d.nsubs)
	}
}

func TestNextEndsWithContext(t *testing.T) {
	d := newDir(t, Options{})
	appendFile(t, d.path("web", 0), "")
	f := open(t, d, "web")
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() {
		_, err := f.Next(ctx)
		errc <- err
	}()
	cancel()
	select {
	case err := <-errc:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("Next after cancel = %v, want context.Canceled", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Next did not return after its context ended")
	}
}

func reportPercentiles(b *testing.B, lat []time.Duration) {
	if len(lat) == 0 {
		return
	}
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-µs")
	b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "p99-µs")
}

func TestFollowBashWriter(t *testing.T) {
	d := newDir(t, Options{})
	path := d.path("svc", 0)
	appendFile(t, path, "")
	f := open(t, d, "svc")
	cmd := exec.Command("bash", "-c", `for i in $(seq 1 3000); do echo "line $i héllo ✓"; done >> "$1"`, "bash", path)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	var want strings.Builder
	for i := 1; i <= 3000; i++ {
		fmt.Fprintf(&want, "line %d héllo ✓\n", i)
	}
	got := collect(t, f, want.Len())
	if diff := cmp.Diff(want.String(), got); diff != "" {
		t.Fatalf("followed output of a bash writer (-want +got):\n%s", diff)
	}
}
