package gitbundle

import (
	"bytes"
	"compress/zlib"
	"encoding/binary"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/proliferate-ai/sandbox-mcp/gitexec"
	"github.com/proliferate-ai/sandbox-mcp/internal/gittest"
)

var testLimits = Limits{MaxObjectBytes: 1 << 20, MaxInflatedBytes: 4 << 20, MaxObjects: 1000}

// world is a sender repository and a receiver cloned from it at base.
type world struct {
	send, recv string
	base       string
	git        *gitexec.Runner
}

func newWorld(t *testing.T) *world {
	t.Helper()
	w := &world{send: t.TempDir(), recv: filepath.Join(t.TempDir(), "recv")}
	gittest.Git(t, w.send, "init", "-q", "-b", "main")
	if err := os.WriteFile(filepath.Join(w.send, "README"), []byte("hi\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	gittest.Git(t, w.send, "add", "-A")
	gittest.Git(t, w.send, "commit", "-q", "-m", "base")
	w.base = strings.TrimSpace(gittest.Git(t, w.send, "rev-parse", "HEAD"))
	gittest.Git(t, t.TempDir(), "clone", "-q", "--bare", w.send, w.recv)
	var err error
	if w.git, err = gitexec.New(gitexec.Options{Environ: gittest.Env()}); err != nil {
		t.Fatal(err)
	}
	return w
}

// bundle is a bundle of the sender's main since base.
func (w *world) bundle(t *testing.T) string {
	t.Helper()
	f := filepath.Join(t.TempDir(), "b.bundle")
	gittest.Git(t, w.send, "bundle", "create", "-q", f, "main", "^"+w.base)
	return f
}

// objectsSize is the bytes under the receiver's object directory.
func objectsSize(t *testing.T, dir string) int64 {
	t.Helper()
	var n int64
	err := filepath.WalkDir(filepath.Join(dir, "objects"), func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if fi, err := d.Info(); err == nil && !d.IsDir() {
			n += fi.Size()
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func TestReceiveAcceptAndDrop(t *testing.T) {
	w := newWorld(t)
	if err := os.WriteFile(filepath.Join(w.send, "a.txt"), []byte("new\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	gittest.Git(t, w.send, "add", "-A")
	gittest.Git(t, w.send, "commit", "-q", "-m", "two")
	head := strings.TrimSpace(gittest.Git(t, w.send, "rev-parse", "HEAD"))
	f := w.bundle(t)
	before := objectsSize(t, w.recv)

	q, err := Receive(t.Context(), w.git, w.recv, f, testLimits)
	if err != nil {
		t.Fatal(err)
	}
	paths, err := q.Paths(t.Context(), []string{head}, 1<<20)
	if err != nil || strings.Join(paths, ",") != "a.txt" {
		t.Errorf("Paths = %q, %v; want [a.txt]", paths, err)
	}
	if _, _, err := w.git.Output(t.Context(), gitexec.Cmd{Dir: w.recv, Args: []string{"cat-file", "-e", head}}, 10); err == nil {
		t.Error("the quarantined commit is visible without the quarantine's Env")
	}
	q.Drop()
	if got := objectsSize(t, w.recv); got != before {
		t.Errorf("objects after Drop: %d bytes, want %d", got, before)
	}

	q, err = Receive(t.Context(), w.git, w.recv, f, testLimits)
	if err != nil {
		t.Fatal(err)
	}
	if err := q.Accept(); err != nil {
		t.Fatal(err)
	}
	if _, _, err := w.git.Output(t.Context(), gitexec.Cmd{Dir: w.recv, Args: []string{"cat-file", "-e", head}}, 10); err != nil {
		t.Errorf("the accepted commit is not in the repository: %v", err)
	}
	if left, _ := filepath.Glob(filepath.Join(w.recv, "objects", quarantinePrefix+"*")); len(left) > 0 {
		t.Errorf("quarantines left after Accept: %q", left)
	}
}

// Each bundle is refused by fsck, and the receiver's objects do not change.
func TestReceiveRefusesFsckErrors(t *testing.T) {
	tests := []struct {
		name  string
		files map[string]string
		want  string
	}{
		{"gitmodules URL starting with -", map[string]string{".gitmodules": gittest.BadGitmodules}, "gitmodulesUrl"},
		{".git directory", map[string]string{".git/config": "[core]\n"}, "hasDotgit"},
		{".GIT directory", map[string]string{".GIT/config": "[core]\n"}, "hasDotgit"},
		{"NTFS short name", map[string]string{"git~1/config": "[core]\n"}, "hasDotgit"},
		{"HFS ignorable", map[string]string{".g\u200cit/config": "[core]\n"}, "hasDotgit"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := newWorld(t)
			gittest.CommitRaw(t, w.send, "evil", tt.files)
			f := w.bundle(t)
			before := objectsSize(t, w.recv)
			_, err := Receive(t.Context(), w.git, w.recv, f, testLimits)
			var rej *Rejection
			if !errors.As(err, &rej) || rej.Rule != "fsck" || !strings.Contains(rej.Detail, tt.want) {
				t.Fatalf("Receive = %v, want an fsck *Rejection naming %s", err, tt.want)
			}
			if got := objectsSize(t, w.recv); got != before {
				t.Errorf("objects after a refusal: %d bytes, want %d", got, before)
			}
		})
	}
}

func TestReceiveRefusesMissingPrerequisite(t *testing.T) {
	w := newWorld(t)
	gittest.Git(t, w.send, "commit", "-q", "--allow-empty", "-m", "two")
	mid := strings.TrimSpace(gittest.Git(t, w.send, "rev-parse", "HEAD"))
	gittest.Git(t, w.send, "commit", "-q", "--allow-empty", "-m", "three")
	f := filepath.Join(t.TempDir(), "b.bundle")
	gittest.Git(t, w.send, "bundle", "create", "-q", f, "main", "^"+mid)
	_, err := Receive(t.Context(), w.git, w.recv, f, testLimits)
	var rej *Rejection
	if !errors.As(err, &rej) {
		t.Fatalf("Receive of a bundle whose base the receiver lacks = %v, want a *Rejection", err)
	}
}

func TestReceiveRefusesOversizedObject(t *testing.T) {
	w := newWorld(t)
	if err := os.WriteFile(filepath.Join(w.send, "big"), make([]byte, 2<<20), 0o644); err != nil {
		t.Fatal(err)
	}
	gittest.Git(t, w.send, "add", "-A")
	gittest.Git(t, w.send, "commit", "-q", "-m", "big")
	_, err := Receive(t.Context(), w.git, w.recv, w.bundle(t), testLimits)
	var rej *Rejection
	if !errors.As(err, &rej) || rej.Rule != "pack" || !strings.Contains(err.Error(), "over the 1048576-byte cap") {
		t.Fatalf("Receive of a 2 MiB blob with a 1 MiB cap = %v, want a pack *Rejection", err)
	}
}

// packEntry encodes a pack entry header of typ and size.
func packEntry(typ int, size int64) []byte {
	b := []byte{byte(typ<<4) | byte(size&0x0f)}
	size >>= 4
	for size > 0 {
		b[len(b)-1] |= 0x80
		b = append(b, byte(size&0x7f))
		size >>= 7
	}
	return b
}

func packHeader(n uint32) []byte {
	b := []byte("PACK\x00\x00\x00\x02\x00\x00\x00\x00")
	binary.BigEndian.PutUint32(b[8:], n)
	return b
}

func deflate(b []byte) []byte {
	var out bytes.Buffer
	zw := zlib.NewWriter(&out)
	zw.Write(b)
	zw.Close()
	return out.Bytes()
}

func varint(n int64) []byte {
	var b []byte
	for {
		c := byte(n & 0x7f)
		n >>= 7
		if n > 0 {
			b = append(b, c|0x80)
			continue
		}
		return append(b, c)
	}
}

func TestScanPack(t *testing.T) {
	blob := append(append(packHeader(1), packEntry(objBlob, 5)...), deflate([]byte("hello"))...)
	// A 10 GiB blob declared: refused before one byte is inflated (there are none).
	bomb := append(packHeader(1), packEntry(objBlob, 10<<30)...)
	// A delta whose result is 10 GiB: refused after reading its 2 varints.
	delta := append(varint(5), varint(10<<30)...)
	deltaBomb := append(append(append(packHeader(1), packEntry(objRefDelta, int64(len(delta)))...), make([]byte, 20)...), deflate(delta)...)
	// An entry that inflates past its declaration.
	liar := append(append(packHeader(1), packEntry(objBlob, 2)...), deflate([]byte("hello"))...)
	// Many small objects that add up past the inflated cap.
	var many []byte
	many = append(many, packHeader(5)...)
	for range 5 {
		many = append(many, packEntry(objBlob, 1<<20)...)
		many = append(many, deflate(make([]byte, 1<<20))...)
	}
	tests := []struct {
		name string
		in   []byte
		want string
	}{
		{"one blob", blob, ""},
		{"declared bomb", bomb, "over the 1048576-byte cap"},
		{"delta result bomb", deltaBomb, "over the 1048576-byte cap"},
		{"longer than declared", liar, "longer than declared"},
		{"inflated total", many, "inflates to more than"},
		{"too many objects", packHeader(1001), "over the cap of 1000"},
		{"bad signature", []byte("KCAP\x00\x00\x00\x02\x00\x00\x00\x00"), "bad signature"},
		{"truncated", blob[:15], "pack: entry 0"},
		{"bad type", append(packHeader(1), 5<<4), "entry type 5"},
	}
	for _, tt := range tests {
		st, err := ScanPack(bytes.NewReader(tt.in), 20, testLimits)
		switch {
		case tt.want == "" && err != nil:
			t.Errorf("%s: ScanPack = %v, want nil", tt.name, err)
		case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
			t.Errorf("%s: ScanPack = %+v, %v; want an error containing %q", tt.name, st, err, tt.want)
		}
	}
}

func FuzzScanPack(f *testing.F) {
	f.Add(append(append(packHeader(1), packEntry(objBlob, 5)...), deflate([]byte("hello"))...))
	delta := append(varint(5), varint(7)...)
	f.Add(append(append(append(packHeader(1), packEntry(objRefDelta, int64(len(delta)))...), make([]byte, 20)...), deflate(delta)...))
	f.Add(append(append(packHeader(1), packEntry(objOfsDelta, 2)...), 0x81, 0x01))
	f.Fuzz(func(t *testing.T, in []byte) {
		st, err := ScanPack(bytes.NewReader(in), 20, testLimits)
		if err != nil {
			return
		}
		if st.Inflated > testLimits.MaxInflatedBytes || st.Largest > testLimits.MaxObjectBytes {
			t.Fatalf("accepted %+v past the limits", st)
		}
	})
}
