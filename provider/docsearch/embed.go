package docsearch

import (
	"bytes"
	"context"
	"database/sql/driver"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"strings"
	"time"

	"modernc.org/sqlite"
)

// Embedder calls an OpenAI-compatible embeddings endpoint (POST <URL>/v1/embeddings).
type Embedder struct {
	// URL is the endpoint's base URL, e.g. https://api.openai.com (a URL already
	// ending in /v1/embeddings is used as it is).
	URL string
	// Model is sent as "model".
	Model string
	// Key, when set, is sent as a bearer token. It is never logged.
	Key string
	// Client is the HTTP client; nil means one with a 60 s timeout.
	Client *http.Client
}

// maxEmbedBatch is how many texts go in one request.
const maxEmbedBatch = 64

func (e *Embedder) endpoint() string {
	u := strings.TrimRight(e.URL, "/")
	if strings.HasSuffix(u, "/v1/embeddings") {
		return u
	}
	return u + "/v1/embeddings"
}

// Embed returns one vector per text, in order.
func (e *Embedder) Embed(ctx context.Context, texts []string) ([][]float32, error) {
	out := make([][]float32, 0, len(texts))
	for len(texts) > 0 {
		n := min(len(texts), maxEmbedBatch)
		vs, err := e.embedBatch(ctx, texts[:n])
		if err != nil {
			return nil, err
		}
		out = append(out, vs...)
		texts = texts[n:]
	}
	return out, nil
}

func (e *Embedder) embedBatch(ctx context.Context, texts []string) ([][]float32, error) {
	body, _ := json.Marshal(map[string]any{"model": e.Model, "input": texts})
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, e.endpoint(), bytes.NewReader(body))
	if err != nil {
		return nil, fmt.Errorf("embed: %w", err)
	}
	req.Header.Set("Content-Type", "application/json")
	if e.Key != "" {
		req.Header.Set("Authorization", "Bearer "+e.Key)
	}
	c := e.Client
	if c == nil {
		c = &http.Client{Timeout: 60 * time.Second}
	}
	resp, err := c.Do(req)
	if err != nil {
		return nil, fmt.Errorf("embed: %w", err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, 256<<20))
	if err != nil {
		return nil, fmt.Errorf("embed: %w", err)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("embed: %s: %s", resp.Status, strings.TrimSpace(string(raw[:min(len(raw), 300)])))
	}
	var r struct {
		Data []struct {
			Index     int       `json:"index"`
			Embedding []float32 `json:"embedding"`
		} `json:"data"`
	}
	if err := json.Unmarshal(raw, &r); err != nil {
		return nil, fmt.Errorf("embed: decode response: %w", err)
	}
	if len(r.Data) != len(texts) {
		return nil, fmt.Errorf("embed: %d embeddings for %d inputs", len(r.Data), len(texts))
	}
	out := make([][]float32, len(texts))
	for _, d := range r.Data {
		if d.Index < 0 || d.Index >= len(texts) || out[d.Index] != nil || len(d.Embedding) == 0 {
			return nil, fmt.Errorf("embed: bad embedding index %d", d.Index)
		}
		out[d.Index] = d.Embedding
	}
	return out, nil
}

// F32Blob encodes a vector as little-endian float32s, libSQL's F32_BLOB layout.
func F32Blob(v []float32) []byte {
	b := make([]byte, 4*len(v))
	for i, f := range v {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(f))
	}
	return b
}

// errVector is vector_distance_cos's error for blobs that are not two F32 vectors of
// the same length.
var errVector = errors.New("vector_distance_cos: want two F32 blobs of the same dimension")

// vectorDistanceCos is the SQL function vector_distance_cos(a, b) = 1 - cos(a, b);
// NULL when either side is NULL.
func vectorDistanceCos(_ *sqlite.FunctionContext, args []driver.Value) (driver.Value, error) {
	a, okA := args[0].([]byte)
	b, okB := args[1].([]byte)
	if args[0] == nil || args[1] == nil {
		return nil, nil
	}
	if !okA || !okB || len(a) != len(b) || len(a)%4 != 0 || len(a) == 0 {
		return nil, errVector
	}
	var dot, na, nb float64
	for i := 0; i < len(a); i += 4 {
		x := float64(math.Float32frombits(binary.LittleEndian.Uint32(a[i:])))
		y := float64(math.Float32frombits(binary.LittleEndian.Uint32(b[i:])))
		dot += x * y
		na += x * x
		nb += y * y
	}
	if na == 0 || nb == 0 {
		return 1.0, nil
	}
	return 1 - dot/(math.Sqrt(na)*math.Sqrt(nb)), nil
}
