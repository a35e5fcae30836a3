package sandboxmcp

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/proliferate-ai/sandbox-mcp/internal/config"
)

func TestLogDurationsAsText(t *testing.T) {
	var b bytes.Buffer
	log := newLogger(&b, config.Config{})
	log.Info("service restarting", "delay", 1500*time.Millisecond, "group", "x")
	log.Info("nested", "g", map[string]any{"d": 2}, "after", time.Second)
	if got := b.String(); !strings.Contains(got, `"delay":"1.5s"`) || !strings.Contains(got, `"after":"1s"`) {
		t.Errorf("log = %s, want durations as \"1.5s\" and \"1s\"", got)
	}
}
