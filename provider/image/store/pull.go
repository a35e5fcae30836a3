package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"regexp"
	"strings"
	"time"
)

// ErrPull is matched (errors.Is) by the error of a pull that could not reach the
// registry or was refused by it.
var ErrPull = errors.New("pull from a registry failed; without a registry, import an OCI tarball (sandboxctl image import)")

// Ref is an image reference of a registry: registry host, repository, and a tag or a
// digest.
type Ref struct {
	Registry, Repository, Tag, Digest string
}

var (
	repoRE = regexp.MustCompile(`^[a-z0-9]+(?:[._-][a-z0-9]+)*(?:/[a-z0-9]+(?:[._-][a-z0-9]+)*)*$`)
	tagRE  = regexp.MustCompile(`^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$`)
	hostRE = regexp.MustCompile(`^(?:[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?)*|\[[0-9a-fA-F:]+\])(?::[0-9]{1,5})?$`)
)

// ParseRef reads a reference the way docker does: a first component with a dot or a
// colon, or "localhost", is the registry (else Docker Hub, where one-component names are
// under library/); then :tag (default latest) or @sha256:digest.
func ParseRef(s string) (Ref, error) {
	r := Ref{Registry: "registry-1.docker.io"}
	rest := s
	if name, digest, ok := strings.Cut(rest, "@"); ok {
		if err := checkDigest(digest); err != nil {
			return Ref{}, fmt.Errorf("reference %q: %w", s, err)
		}
		rest, r.Digest = name, digest
	}
	if first, after, ok := strings.Cut(rest, "/"); ok && (strings.ContainsAny(first, ".:") || first == "localhost") {
		if !hostRE.MatchString(first) {
			return Ref{}, fmt.Errorf("reference %q: registry %q is not a host name", s, first)
		}
		r.Registry, rest = first, after
	}
	if i := strings.LastIndex(rest, ":"); i >= 0 {
		rest, r.Tag = rest[:i], rest[i+1:]
		if !tagRE.MatchString(r.Tag) {
			return Ref{}, fmt.Errorf("reference %q: tag %q is not valid", s, r.Tag)
		}
	}
	if r.Tag == "" && r.Digest == "" {
		r.Tag = "latest"
	}
	if !repoRE.MatchString(rest) {
		return Ref{}, fmt.Errorf("reference %q: repository %q is not valid", s, rest)
	}
	if r.Registry == "registry-1.docker.io" && !strings.Contains(rest, "/") {
		rest = "library/" + rest
	}
	r.Repository = rest
	return r, nil
}

func (r Ref) base() string {
	scheme := "https"
	if host, _, _ := strings.Cut(r.Registry, ":"); host == "localhost" || host == "127.0.0.1" || host == "[::1]" {
		scheme = "http" // a registry on this machine, as docker allows
	}
	return scheme + "://" + r.Registry + "/v2/" + r.Repository
}

// registry is one pull's client: it answers a Bearer challenge once and keeps the token.
type registry struct {
	c     *http.Client
	ref   Ref
	token string
}

const manifestAccept = mediaIndex + ", " + mediaManifest + ", " + dockerList + ", " + dockerManifest

// get fetches path under the repository, following one Bearer token challenge.
func (g *registry) get(ctx context.Context, path, accept string) (*http.Response, error) {
	for attempt := 0; ; attempt++ {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, g.ref.base()+path, nil)
		if err != nil {
			return nil, err
		}
		if accept != "" {
			req.Header.Set("Accept", accept)
		}
		if g.token != "" {
			req.Header.Set("Authorization", "Bearer "+g.token)
		}
		resp, err := g.c.Do(req)
		if err != nil {
			return nil, fmt.Errorf("%w: %v", ErrPull, err)
		}
		if resp.StatusCode == http.StatusUnauthorized && attempt == 0 {
			challenge := resp.Header.Get("WWW-Authenticate")
			resp.Body.Close()
			if err := g.authorize(ctx, challenge); err != nil {
				return nil, err
			}
			continue
		}
		if resp.StatusCode != http.StatusOK {
			resp.Body.Close()
			return nil, fmt.Errorf("%w: GET %s: %s", ErrPull, path, resp.Status)
		}
		return resp, nil
	}
}

// authorize gets an anonymous token for a `Bearer realm=…,service=…,scope=…` challenge.
func (g *registry) authorize(ctx context.Context, challenge string) error {
	kind, params, _ := strings.Cut(challenge, " ")
	if !strings.EqualFold(kind, "Bearer") {
		return fmt.Errorf("%w: the registry asks for %q authentication", ErrPull, kind)
	}
	p := map[string]string{}
	for _, kv := range strings.Split(params, ",") {
		k, v, _ := strings.Cut(strings.TrimSpace(kv), "=")
		p[k] = strings.Trim(v, `"`)
	}
	realm, err := url.Parse(p["realm"])
	if err != nil || (realm.Scheme != "https" && realm.Scheme != "http") {
		return fmt.Errorf("%w: bad token realm %q", ErrPull, p["realm"])
	}
	q := realm.Query()
	for _, k := range []string{"service", "scope"} {
		if p[k] != "" {
			q.Set(k, p[k])
		}
	}
	realm.RawQuery = q.Encode()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, realm.String(), nil)
	if err != nil {
		return err
	}
	resp, err := g.c.Do(req)
	if err != nil {
		return fmt.Errorf("%w: token: %v", ErrPull, err)
	}
	defer resp.Body.Close()
	var tok struct {
		Token       string `json:"token"`
		AccessToken string `json:"access_token"`
	}
	if resp.StatusCode != http.StatusOK || decodeJSON(resp.Body, &tok) != nil {
		return fmt.Errorf("%w: token: %s", ErrPull, resp.Status)
	}
	g.token = tok.Token
	if g.token == "" {
		g.token = tok.AccessToken
	}
	return nil
}

// manifest fetches the manifest (or index) ref names and stores it as a blob.
func (g *registry) manifest(ctx context.Context, s *Store, ref string) (descriptor, error) {
	resp, err := g.get(ctx, "/manifests/"+ref, manifestAccept)
	if err != nil {
		return descriptor{}, err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxJSON+1))
	if err != nil || len(data) > maxJSON {
		return descriptor{}, fmt.Errorf("%w: manifest %s is unreadable or too large", ErrPull, ref)
	}
	var head struct {
		MediaType string `json:"mediaType"`
	}
	_ = json.Unmarshal(data, &head)
	media := head.MediaType
	if media == "" {
		media = strings.TrimSpace(strings.Split(resp.Header.Get("Content-Type"), ";")[0])
	}
	d, err := s.writeBlob(media, data)
	if err != nil {
		return descriptor{}, err
	}
	if strings.HasPrefix(ref, "sha256:") && d.Digest != ref {
		return descriptor{}, fmt.Errorf("%w: manifest %s has digest %s", ErrPull, ref, d.Digest)
	}
	return d, nil
}

// Pull fetches ref from its registry (anonymously; client nil means a default one), stores its blobs after checking
// their digests, unpacks its layers and names the image ref. Without a reachable
// registry the error matches ErrPull.
func (s *Store) Pull(ctx context.Context, ref string, client *http.Client) (string, error) {
	r, err := ParseRef(ref)
	if err != nil {
		return "", err
	}
	if client == nil {
		t := http.DefaultTransport.(*http.Transport).Clone()
		t.ResponseHeaderTimeout = time.Minute // a registry that accepts and never answers
		client = &http.Client{Transport: t}
	}
	g := &registry{c: client, ref: r}
	tagOrDigest := r.Tag
	if r.Digest != "" {
		tagOrDigest = r.Digest
	}
	d, err := g.manifest(ctx, s, tagOrDigest)
	if err != nil {
		return "", fmt.Errorf("pull %s: %w", ref, err)
	}
	if d.MediaType == mediaIndex || d.MediaType == dockerList {
		var idx index
		if err := s.readJSON(d, &idx); err != nil {
			return "", err
		}
		if d, err = s.pickFrom(idx); err != nil {
			return "", fmt.Errorf("pull %s: %w", ref, err)
		}
		if d, err = g.manifest(ctx, s, d.Digest); err != nil {
			return "", fmt.Errorf("pull %s: %w", ref, err)
		}
	}
	var m manifest
	if err := s.readJSON(d, &m); err != nil {
		return "", fmt.Errorf("pull %s: %w", ref, err)
	}
	for _, b := range append([]descriptor{m.Config}, m.Layers...) {
		if err := g.blob(ctx, s, b.Digest); err != nil {
			return "", fmt.Errorf("pull %s: %w", ref, err)
		}
	}
	unlock, err := s.lock()
	if err != nil {
		return "", err
	}
	defer unlock()
	name := ref
	if checkName(name) != nil {
		name = ""
	}
	return s.importManifest(ctx, d, "", name, 1)
}

// pickFrom is the linux/GOARCH manifest of an index.
func (s *Store) pickFrom(idx index) (descriptor, error) {
	data, _ := json.Marshal(idx)
	d, err := s.writeBlob(mediaIndex, data)
	if err != nil {
		return descriptor{}, err
	}
	return s.pickManifest(d)
}

// blob fetches a blob into the store unless it is there.
func (g *registry) blob(ctx context.Context, s *Store, digest string) error {
	if err := checkDigest(digest); err != nil {
		return err
	}
	if _, err := statBlob(s, digest); err == nil {
		return nil
	}
	resp, err := g.get(ctx, "/blobs/"+digest, "")
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	return s.storeBlob(resp.Body, digest)
}

func statBlob(s *Store, digest string) (os.FileInfo, error) { return os.Stat(s.blobPath(digest)) }
