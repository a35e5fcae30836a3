package progress

import (
	"bytes"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/creack/pty"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// clock is a settable clock for the elapsed times a Reporter prints.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

func TestPlainLines(t *testing.T) {
	tests := []struct {
		name   string
		writes []string
		want   string
	}{
		{"one line", []string{"building\n"}, "building\n"},
		{"split across writes", []string{"buil", "ding\nstep ", "2\n"}, "building\nstep 2\n"},
		{"empty lines dropped", []string{"\n\n  \na\n\n"}, "a\n"},
		{"carriage returns end lines", []string{"10%\r20%\r\n"}, "10%\n20%\n"},
		{"trailing spaces trimmed", []string{"a  \t\n"}, "a\n"},
		{"unfinished line flushed by Done", []string{"a\nb"}, "a\nb\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var out bytes.Buffer
			r := New(&out, Options{})
			for _, w := range tt.writes {
				if n, err := r.Write([]byte(w)); n != len(w) || err != nil {
					t.Fatalf("Write(%q) = %d, %v; want %d, nil", w, n, err, len(w))
				}
			}
			r.Done()
			r.Done()
			r.Step("after done")
			if got := out.String(); got != tt.want {
				t.Errorf("writes %q gave %q, want %q", tt.writes, got, tt.want)
			}
		})
	}
}

func TestStepPlain(t *testing.T) {
	var out bytes.Buffer
	r := New(&out, Options{})
	r.Step("pulling %s", "debian:bookworm-slim")
	r.Step("layer %d/%d", 1, 3)
	r.Done()
	if got, want := out.String(), "pulling debian:bookworm-slim\nlayer 1/3\n"; got != want {
		t.Errorf("output %q, want %q", got, want)
	}
}

func TestElapsed(t *testing.T) {
	tests := []struct {
		d    time.Duration
		want string
	}{
		{0, "0s"},
		{1400 * time.Millisecond, "1s"},
		{59 * time.Second, "59s"},
		{125 * time.Second, "2m05s"},
		{time.Hour + 2*time.Minute + 3*time.Second, "1h02m"},
	}
	for _, tt := range tests {
		if got := Elapsed(tt.d); got != tt.want {
			t.Errorf("Elapsed(%v) = %q, want %q", tt.d, got, tt.want)
		}
	}
}

// TestTerminalBar drives a Reporter on a real pseudo-terminal: it is one
// line, rewritten in place, with the step, its number and the elapsed time,
// redrawn while a step is silent, and replaced at the end by a plain line.
func TestTerminalBar(t *testing.T) {
	ptmx, tty, err := pty.Open()
	if err != nil {
		t.Skipf("no pseudo-terminal: %v", err)
	}
	defer ptmx.Close()
	if err := pty.Setsize(ptmx, &pty.Winsize{Cols: 40, Rows: 10}); err != nil {
		t.Fatal(err)
	}
	if !IsTerminal(tty) {
		t.Fatalf("IsTerminal(%s) = false, want true", tty.Name())
	}
	if IsTerminal(&bytes.Buffer{}) {
		t.Errorf("IsTerminal(buffer) = true, want false")
	}
	read := make(chan string)
	go func() {
		b, _ := io.ReadAll(ptmx)
		read <- string(b)
	}()
	c := &clock{t: time.Unix(1000, 0)}
	r := New(tty, Options{Terminal: true, Interval: time.Millisecond, Now: c.now})
	r.Step("base image")
	c.add(75 * time.Second)
	r.Write([]byte("[1/2] RUN apt-get install a very long list of packages that does not fit\n"))
	// Redraws happen while the step is silent; wait for one (bounded).
	for i := 0; i < 1000 && frame(r) < 3; i++ {
		time.Sleep(time.Millisecond)
	}
	c.add(5 * time.Second)
	r.Done()
	tty.Close()
	got := <-read

	if strings.Count(got, "\n") != 1 || !strings.HasSuffix(got, "\r\n") {
		t.Errorf("terminal output %q: want one line, ended once", got)
	}
	for _, want := range []string{"\r\x1b[K| 0s  step 1  base image", "1m15s  step 2  [1/2] RUN apt-get", "[1/2] RUN apt-get install a very long list of packages that does not fit"[:10]} {
		if !strings.Contains(got, want) {
			t.Errorf("terminal output %q lacks %q", got, want)
		}
	}
	last := got[strings.LastIndex(got, "\x1b[K")+3:]
	if want := "[1/2] RUN apt-get install a very long l"; !strings.HasPrefix(last, want) || len(strings.TrimRight(last, "\r\n")) > 39 {
		t.Errorf("final line %q, want it to start %q and fit in 39 columns", last, want)
	}
	for _, bar := range strings.Split(got, "\r\x1b[K")[1:] {
		if n := len([]rune(strings.TrimRight(bar, "\r\n"))); n > 39 {
			t.Errorf("bar %q is %d columns wide, want at most 39", bar, n)
		}
	}
	if frames := strings.Count(got, "step 2"); frames < 3 {
		t.Errorf("step 2 was drawn %d times, want redraws while it is silent", frames)
	}
}

func frame(r *Reporter) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.frame
}

// TestTerminalWithoutSteps: a Reporter that saw no step leaves the terminal as it was.
func TestTerminalWithoutSteps(t *testing.T) {
	var out bytes.Buffer
	r := New(&out, Options{Terminal: true, Width: 20, Interval: time.Millisecond})
	time.Sleep(5 * time.Millisecond)
	r.Done()
	if out.Len() != 0 {
		t.Errorf("output %q, want none", out.String())
	}
}

// FuzzWrite: whatever an operation writes, plain mode prints its non-empty
// lines and nothing else, and the bar never carries a control character
// that would move the cursor off its line.
func FuzzWrite(f *testing.F) {
	f.Add([]byte("a\nb\r\nc"), 7)
	f.Add([]byte("\x1b[2J\x07tab\there\n"), 3)
	f.Fuzz(func(t *testing.T, data []byte, cut int) {
		if cut < 0 || cut > len(data) {
			cut = len(data) / 2
		}
		var plain, term bytes.Buffer
		p := New(&plain, Options{})
		tr := New(&term, Options{Terminal: true, Width: 30, Interval: time.Hour})
		for _, w := range []io.Writer{p, tr} {
			w.Write(data[:cut])
			w.Write(data[cut:])
		}
		p.Done()
		tr.Done()
		var want strings.Builder
		for _, l := range strings.FieldsFunc(string(data), func(r rune) bool { return r == '\n' || r == '\r' }) {
			if l = strings.TrimRight(l, " \t"); strings.TrimSpace(l) != "" {
				want.WriteString(l + "\n")
			}
		}
		if plain.String() != want.String() {
			t.Errorf("plain output %q, want %q", plain.String(), want.String())
		}
		for _, bar := range strings.Split(term.String(), "\r\x1b[K")[1:] {
			bar = strings.TrimSuffix(bar, "\n")
			if strings.ContainsFunc(bar, func(r rune) bool { return r < 0x20 || r == 0x7f }) {
				t.Errorf("bar %q holds a control character", bar)
			}
		}
	})
}

func TestBytes(t *testing.T) {
	tests := []struct {
		n    int64
		want string
	}{
		{0, "0 B"},
		{999, "999 B"},
		{1000, "1.0 kB"},
		{1500, "1.5 kB"},
		{29_100_000, "29.1 MB"},
		{1_100_000_000, "1.1 GB"},
		{3_000_000_000_000_000, "3.0 PB"},
		{3_000_000_000_000_000_000, "3000.0 PB"},
	}
	for _, tt := range tests {
		if got := Bytes(tt.n); got != tt.want {
			t.Errorf("Bytes(%d) = %q, want %q", tt.n, got, tt.want)
		}
	}
}

// TestUpdate: an update changes the bar's text and not its step number, and
// never reaches plain lines.
func TestUpdate(t *testing.T) {
	var plain bytes.Buffer
	p := New(&plain, Options{})
	p.Step("layer 1/2 abc: 10.0 MB, downloading")
	p.Update("layer 1/2 abc: 5.0 MB of 10.0 MB")
	p.Step("layer 1/2 abc: 10.0 MB, downloaded in 1s")
	p.Done()
	if got, want := plain.String(), "layer 1/2 abc: 10.0 MB, downloading\nlayer 1/2 abc: 10.0 MB, downloaded in 1s\n"; got != want {
		t.Errorf("plain output %q, want %q", got, want)
	}

	var term lockedBuffer
	r := New(&term, Options{Terminal: true, Width: 80, Interval: time.Millisecond})
	r.Step("layer 1/2 abc: 10.0 MB, downloading")
	r.Update("layer 1/2 abc: 5.0 MB of 10.0 MB")
	for i := 0; i < 1000 && !strings.Contains(term.String(), "5.0 MB of"); i++ {
		time.Sleep(time.Millisecond)
	}
	r.Done()
	got := term.String()
	if !strings.Contains(got, "step 1  layer 1/2 abc: 5.0 MB of 10.0 MB") || strings.Contains(got, "step 2") {
		t.Errorf("terminal output %q: want the update drawn as step 1", got)
	}
}

// lockedBuffer is a bytes.Buffer a test may read while a Reporter writes to it.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
