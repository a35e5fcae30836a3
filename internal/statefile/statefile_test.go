package statefile

import (
	"encoding/json"
	"errors"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
)

func TestExposedPortLoad(t *testing.T) {
	tests := []struct {
		name    string
		content string // "" writes no file
		want    int    // 0: none
		wantErr bool
	}{
		{"no file", "", 0, false},
		{"null", `{"services":{},"exposedPort":null}`, 0, false},
		{"no key", `{"services":{}}`, 0, false},
		{"port", `{"services":{"a":{"name":"a"}},"exposedPort":5173}`, 5173, false},
		{"zero", `{"exposedPort":0}`, 0, false},
		{"too high", `{"exposedPort":70000}`, 0, false},
		{"string", `{"exposedPort":"3000"}`, 0, true},
		{"garbage", `not json`, 0, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			if tt.content != "" {
				if err := os.WriteFile(Path(dir), []byte(tt.content), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			p, err := ExposedPort{Dir: dir}.Load()
			if (err != nil) != tt.wantErr {
				t.Fatalf("Load() error = %v, want error %v", err, tt.wantErr)
			}
			if tt.wantErr && !errors.Is(err, ErrUnusable) {
				t.Errorf("Load() error = %v, want ErrUnusable", err)
			}
			got := 0
			if p != nil {
				got = *p
			}
			if got != tt.want {
				t.Errorf("Load() = %d, want %d", got, tt.want)
			}
		})
	}
}

// A FIFO planted as the state file is refused at once, not read forever.
func TestReadFIFO(t *testing.T) {
	dir := t.TempDir()
	if err := syscall.Mkfifo(Path(dir), 0o600); err != nil {
		t.Skip("mkfifo:", err)
	}
	if _, err := (ExposedPort{Dir: dir}).Load(); !errors.Is(err, ErrUnusable) {
		t.Errorf("Load of a FIFO = %v, want ErrUnusable", err)
	}
	if err := (ExposedPort{Dir: dir}).Save(3000); !errors.Is(err, ErrUnusable) {
		t.Errorf("Save over a FIFO = %v, want ErrUnusable", err)
	}
}

// Save changes only its key: the services stay byte for byte, the file is
// two-space indented with services first, and its mode is 0600.
func TestExposedPortSaveKeepsServices(t *testing.T) {
	dir := t.TempDir()
	services := `{"services":{"web":{"name":"web","command":"npm run dev","env":{"A":"b"}}},"exposedPort":null}`
	if err := os.WriteFile(Path(dir), []byte(services), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := (ExposedPort{Dir: dir}).Save(8080); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(Path(dir))
	if err != nil {
		t.Fatal(err)
	}
	want := `{
  "services": {
    "web": {
      "name": "web",
      "command": "npm run dev",
      "env": {
        "A": "b"
      }
    }
  },
  "exposedPort": 8080
}
`
	if string(b) != want {
		t.Errorf("state file after Save:\n%s\nwant:\n%s", b, want)
	}
	if fi, err := os.Stat(Path(dir)); err != nil || fi.Mode().Perm() != Perm {
		t.Errorf("mode = %v, %v; want %v", fi.Mode().Perm(), err, os.FileMode(Perm))
	}
	if err := (ExposedPort{Dir: dir}).Save(0); err == nil {
		t.Error("Save(0) succeeded, want an error")
	}
}

// Save on a fresh state dir writes an empty services object, as a sidecar does.
func TestExposedPortSaveFresh(t *testing.T) {
	dir := t.TempDir()
	if err := (ExposedPort{Dir: dir}).Save(3000); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(Path(dir))
	if string(b) != "{\n  \"services\": {},\n  \"exposedPort\": 3000\n}\n" {
		t.Errorf("state file = %q", b)
	}
}

// Writers of the two keys under Lock never lose each other's update: one
// goroutine saves ports while another rewrites the services as the service
// manager does (read under the lock, change its key, write whole).
func TestLockKeepsBothKeys(t *testing.T) {
	dir := t.TempDir()
	const n = 50
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		for i := 1; i <= n; i++ {
			if err := (ExposedPort{Dir: dir}).Save(3000 + i); err != nil {
				t.Error(err)
				return
			}
		}
	}()
	go func() {
		defer wg.Done()
		for i := 1; i <= n; i++ {
			if err := addService(dir, i); err != nil {
				t.Error(err)
				return
			}
		}
	}()
	wg.Wait()
	b, _ := os.ReadFile(Path(dir))
	if !strings.Contains(string(b), `"exposedPort": 3050`) {
		t.Errorf("last port lost:\n%s", b)
	}
	if got := strings.Count(string(b), `"s`); got != n+1 { // "services" and n services
		t.Errorf("%d services in the file, want %d:\n%s", got-1, n, b)
	}
}

// addService is the service manager's way of changing the file, reduced.
func addService(dir string, i int) error {
	unlock, err := Lock(dir)
	if err != nil {
		return err
	}
	defer unlock()
	raw, _, err := Read(Path(dir))
	if err != nil {
		return err
	}
	doc := struct {
		Services    map[string]map[string]string `json:"services"`
		ExposedPort json.RawMessage              `json:"exposedPort"`
	}{}
	if raw != nil {
		if err := json.Unmarshal(raw, &doc); err != nil {
			return err
		}
	}
	if doc.Services == nil {
		doc.Services = map[string]map[string]string{}
	}
	doc.Services["s"+strconv.Itoa(i)] = map[string]string{"name": "x"}
	b, err := Encode(doc)
	if err != nil {
		return err
	}
	return Write(Path(dir), b)
}

// FuzzExposedPort: whatever the state file holds, Load never panics and
// never returns a port outside 1-65535; Save over a usable file keeps its
// services readable.
func FuzzExposedPort(f *testing.F) {
	f.Add([]byte(`{"services":{},"exposedPort":3000}`))
	f.Add([]byte(`{"exposedPort":-1}`))
	f.Add([]byte(`{"services":null,"exposedPort":1e9}`))
	f.Add([]byte(`[]`))
	dir := f.TempDir()
	f.Fuzz(func(t *testing.T, b []byte) {
		if err := os.WriteFile(Path(dir), b, 0o600); err != nil {
			t.Fatal(err)
		}
		p, err := ExposedPort{Dir: dir}.Load()
		if err == nil && p != nil && (*p < 1 || *p > 65535) {
			t.Fatalf("Load = %d", *p)
		}
		if err != nil {
			return
		}
		if err := (ExposedPort{Dir: dir}).Save(4000); err != nil {
			return
		}
		if p, err := (ExposedPort{Dir: dir}).Load(); err != nil || p == nil || *p != 4000 {
			t.Fatalf("Load after Save(4000) = %v, %v", p, err)
		}
	})
}
