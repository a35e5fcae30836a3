package provider

import (
	"encoding/json"
	"strings"
	"testing"
)

func BenchmarkBuildPlan(b *testing.B) {
	opts := freshTwoRepos()
	cfg := PlanConfig{Kind: KindE2B, Now: planNow, Settings: HostSettings{LLMProxyBaseURL: "https://p/v1"}}
	for b.Loop() {
		if _, err := BuildPlan(opts, cfg); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkRedactSecrets(b *testing.B) {
	text := strings.Repeat("git clone https://x-access-token:ghs_abc@github.com/o/r failed: Bearer abc.def sk-ant-xyz; ", 10)
	b.SetBytes(int64(len(text)))
	for b.Loop() {
		RedactSecrets(text)
	}
}

func BenchmarkParseServiceCommands(b *testing.B) {
	raw := json.RawMessage(items(10))
	for b.Loop() {
		if len(ParseServiceCommands(raw)) != 10 {
			b.Fatal("parse")
		}
	}
}
