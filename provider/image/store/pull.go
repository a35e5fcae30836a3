package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"runtime"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/proliferate-ai/sandbox-mcp/provider/progress"
)

// ErrPull is matched (errors.Is) by the error of a pull that could not reach the
// registry or was refused by it.
var ErrPull = errors.New("pull from a registry failed; without a registry, import an OCI tarball (sandboxctl image import)")

// Progress hears how a pull goes: Step for each part begun or ended (a plain line
// where no bar is drawn), Update for the bytes of the part under way (shown only on a
// bar). *progress.Reporter is one.
type Progress interface {
	Step(format string, args ...any)
	Update(format string, args ...any)
}

// PullOptions say how Pull reaches a registry and whom it tells how far it is.
type PullOptions struct {
	// Transport carries the requests. Nil: a clone of http.DefaultTransport that
	// gives up on a registry which accepts a request and does not answer it within a
	// minute.
	Transport http.RoundTripper
	// Keychain finds the credentials for a registry (authn.DefaultKeychain: those of
	// `docker login`). Nil: anonymous. They are sent to the registry only.
	Keychain authn.Keychain
	// Progress hears of the manifest and of each layer's bytes. Nil: nobody.
	Progress Progress
}

// Pull fetches ref (docker's form: Docker Hub unless the first component names a
// registry; :latest unless a tag or digest is given) for linux/GOARCH, stores its
// blobs after checking their digests, unpacks its layers and names the image ref.
// Without a reachable registry the error matches ErrPull.
func (s *Store) Pull(ctx context.Context, ref string, o PullOptions) (string, error) {
	r, err := name.ParseReference(ref)
	if err != nil {
		return "", fmt.Errorf("pull %s: the reference is not valid: %w", ref, err)
	}
	p, err := newPuller(o)
	if err != nil {
		return "", fmt.Errorf("pull %s: %w", ref, err)
	}
	prog := o.Progress
	if prog == nil {
		prog = quiet{}
	}
	start := time.Now()
	d, m, err := s.pullManifest(ctx, p, r)
	if err != nil {
		return "", fmt.Errorf("pull %s: %w", ref, err)
	}
	var total int64
	for _, l := range m.Layers {
		total += l.Size
	}
	prog.Step("%s: manifest %s, %s, %s", ref, short(strings.TrimPrefix(string(d.Digest), "sha256:")), layers(len(m.Layers)), progress.Bytes(total))
	if err := s.pullBlob(ctx, p, r.Context(), m.Config, maxJSON, nil); err != nil {
		return "", fmt.Errorf("pull %s: config: %w", ref, err)
	}
	for i, l := range m.Layers {
		lp := layerProgress{p: prog, n: i + 1, of: len(m.Layers), d: l}
		if err := s.pullBlob(ctx, p, r.Context(), l, -1, &lp); err != nil {
			return "", fmt.Errorf("pull %s: layer %d/%d: %w", ref, i+1, len(m.Layers), err)
		}
	}
	unlock, err := s.lock()
	if err != nil {
		return "", err
	}
	defer unlock()
	n := ref
	if checkName(n) != nil {
		n = ""
	}
	prog.Step("%s: unpacking %s", ref, layers(len(m.Layers)))
	id, err := s.importManifest(ctx, d, "", n, 1)
	if err != nil {
		return "", fmt.Errorf("pull %s: %w", ref, err)
	}
	prog.Step("%s: pulled %s in %s", ref, short(id), time.Since(start).Round(time.Millisecond))
	return id, nil
}

// newPuller is a registry client for one pull: it answers the registry's token
// challenge once and reuses the token for every blob.
func newPuller(o PullOptions) (*remote.Puller, error) {
	t := o.Transport
	if t == nil {
		dt := remote.DefaultTransport.(*http.Transport).Clone()
		dt.ResponseHeaderTimeout = time.Minute // a registry that accepts and never answers
		t = dt
	}
	opts := []remote.Option{
		remote.WithTransport(t),
		remote.WithPlatform(v1.Platform{OS: "linux", Architecture: runtime.GOARCH}),
		remote.WithUserAgent("sandbox-mcp"),
	}
	if o.Keychain != nil {
		opts = append(opts, remote.WithAuthFromKeychain(o.Keychain))
	}
	return remote.NewPuller(opts...)
}

// pullManifest fetches the image manifest of ref for this machine's platform
// (following an index) and stores it as a blob.
func (s *Store) pullManifest(ctx context.Context, p *remote.Puller, r name.Reference) (ocispec.Descriptor, ocispec.Manifest, error) {
	rd, err := p.Get(ctx, r) // a manifest pulled by digest is checked against it
	if err != nil {
		return ocispec.Descriptor{}, ocispec.Manifest{}, fmt.Errorf("%w: %w", ErrPull, err)
	}
	img, err := rd.Image() // of an index: the linux/GOARCH manifest, checked against its digest
	if err != nil {
		return ocispec.Descriptor{}, ocispec.Manifest{}, fmt.Errorf("%w: %w", ErrPull, err)
	}
	raw, err := img.RawManifest()
	if err != nil {
		return ocispec.Descriptor{}, ocispec.Manifest{}, fmt.Errorf("%w: %w", ErrPull, err)
	}
	if len(raw) > maxJSON {
		return ocispec.Descriptor{}, ocispec.Manifest{}, fmt.Errorf("manifest is larger than %d bytes", maxJSON)
	}
	var m ocispec.Manifest
	if err := json.Unmarshal(raw, &m); err != nil {
		return ocispec.Descriptor{}, ocispec.Manifest{}, fmt.Errorf("parse manifest: %w", err)
	}
	// The manifest's own media type, else the one the registry sent it as.
	media := m.MediaType
	if media == "" {
		mt, err := img.MediaType()
		if err != nil {
			return ocispec.Descriptor{}, ocispec.Manifest{}, fmt.Errorf("%w: %w", ErrPull, err)
		}
		media = string(mt)
	}
	switch media {
	case ocispec.MediaTypeImageManifest, dockerManifest:
	default:
		return ocispec.Descriptor{}, ocispec.Manifest{}, fmt.Errorf("manifest has media type %q, not an image manifest this store reads", media)
	}
	d, err := s.writeBlob(media, raw)
	if err != nil {
		return ocispec.Descriptor{}, ocispec.Manifest{}, err
	}
	return d, m, nil
}

// pullBlob fetches the blob of d into the store unless it is there; limit, when not
// negative, is the most bytes it may have.
func (s *Store) pullBlob(ctx context.Context, p *remote.Puller, repo name.Repository, d ocispec.Descriptor, limit int64, lp *layerProgress) error {
	if err := checkDigest(d.Digest); err != nil {
		return err
	}
	if limit >= 0 && d.Size > limit {
		return fmt.Errorf("blob %s is larger than %d bytes", d.Digest, limit)
	}
	if _, err := os.Stat(s.blobPath(d.Digest)); err == nil {
		lp.cached()
		return nil
	}
	l, err := p.Layer(ctx, repo.Digest(d.Digest.String()))
	if err != nil {
		return fmt.Errorf("%w: %w", ErrPull, err)
	}
	rc, err := l.Compressed()
	if err != nil {
		return fmt.Errorf("%w: %w", ErrPull, err)
	}
	defer rc.Close()
	var src io.Reader = rc
	if limit >= 0 {
		src = io.LimitReader(rc, limit+1)
	}
	if lp != nil {
		lp.begin()
		src = &countingReader{r: src, on: lp.update}
	}
	if err := s.storeBlob(src, d.Digest); err != nil {
		return err
	}
	lp.end()
	return nil
}

// layerProgress tells a Progress about one layer's download.
type layerProgress struct {
	p      Progress
	n, of  int
	d      ocispec.Descriptor
	start  time.Time
	copied int64
}

func (l *layerProgress) name() string {
	return fmt.Sprintf("layer %d/%d %s", l.n, l.of, short(strings.TrimPrefix(string(l.d.Digest), "sha256:")))
}

func (l *layerProgress) cached() {
	if l != nil {
		l.p.Step("%s: %s, already stored", l.name(), progress.Bytes(l.d.Size))
	}
}

func (l *layerProgress) begin() {
	l.start = time.Now()
	l.p.Step("%s: %s, downloading", l.name(), progress.Bytes(l.d.Size))
}

func (l *layerProgress) update(n int) {
	l.copied += int64(n)
	l.p.Update("%s: %s of %s", l.name(), progress.Bytes(l.copied), progress.Bytes(l.d.Size))
}

func (l *layerProgress) end() {
	if l != nil {
		l.p.Step("%s: %s, downloaded in %s", l.name(), progress.Bytes(l.copied), time.Since(l.start).Round(time.Millisecond))
	}
}

// countingReader calls on with the size of every read.
type countingReader struct {
	r  io.Reader
	on func(n int)
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	if n > 0 {
		c.on(n)
	}
	return n, err
}

func layers(n int) string {
	if n == 1 {
		return "1 layer"
	}
	return fmt.Sprintf("%d layers", n)
}

type quiet struct{}

func (quiet) Step(string, ...any)   {}
func (quiet) Update(string, ...any) {}
