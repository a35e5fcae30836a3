package docsearch

import (
	"encoding/json"
	"strings"
	"testing"
)

func TestFit(t *testing.T) {
	long := strings.Repeat("word \"quoted\" ", 2000)
	tests := []struct {
		name    string
		in      Results
		budget  int
		results int
		cut     bool
	}{
		{"fits as is", Results{Mode: "bm25", Results: []Result{{Package: "p", Title: "t", Content: "short"}}}, 16 << 10, 1, false},
		{"one long", Results{Mode: "bm25", Results: []Result{{Package: "p", Title: "t", Content: long}}}, 4 << 10, 1, true},
		{"short keeps, long cut", Results{Mode: "bm25", Results: []Result{{Title: "a", Content: "tiny"}, {Title: "b", Content: long}, {Title: "c", Content: long}}}, 4 << 10, 3, true},
		{"too many for the budget", Results{Mode: "bm25", Results: []Result{{Title: strings.Repeat("t", 350)}, {Title: strings.Repeat("u", 350)}, {Title: strings.Repeat("v", 350), Content: long}}}, 1000, 2, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := tt.in.Fit(tt.budget)
			b, _ := json.Marshal(got)
			if len(b) > tt.budget {
				t.Errorf("Fit(%d) = %d bytes of JSON", tt.budget, len(b))
			}
			if len(got.Results) != tt.results {
				t.Errorf("Fit(%d) kept %d results, want %d", tt.budget, len(got.Results), tt.results)
			}
			if cut := strings.Contains(got.Note, "output budget"); cut != tt.cut {
				t.Errorf("Fit(%d) note = %q, want a cut note: %v", tt.budget, got.Note, tt.cut)
			}
			if tt.name == "short keeps, long cut" && got.Results[0].Content != "tiny" {
				t.Errorf("the short content was cut: %q", got.Results[0].Content)
			}
		})
	}
}

func TestOutline(t *testing.T) {
	r := Results{Results: []Result{{Title: "Install", Content: "## Install\n\nnpm i x\nline three\nline four\n"}}}
	got := r.Outline().Results[0].Content
	if got != "## Install\nnpm i x\nline three" {
		t.Errorf("Outline content = %q, want the first three non-empty lines", got)
	}
	if r.Results[0].Content == got {
		t.Error("Outline changed its receiver")
	}
}
