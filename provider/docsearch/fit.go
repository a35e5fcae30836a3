package docsearch

import (
	"encoding/json"
	"fmt"
	"strings"
)

// Outline is the results with each content cut to its first lines (at most
// outlineLines non-empty lines, outlineBytes bytes): titles and openings to choose
// from, for a model that then searches one package or reads a source.
func (r Results) Outline() Results {
	out := r
	out.Results = make([]Result, len(r.Results))
	for i, x := range r.Results {
		var lines []string
		for l := range strings.Lines(x.Content) {
			if l = strings.TrimSpace(l); l != "" {
				lines = append(lines, l)
			}
			if len(lines) == outlineLines {
				break
			}
		}
		x.Content = clip(strings.Join(lines, "\n"), outlineBytes)
		out.Results[i] = x
	}
	return out
}

const (
	outlineLines = 3
	outlineBytes = 300
)

// Fit cuts the results' contents so that their compact JSON is at most budget bytes:
// every result keeps its place and title, and the room left for contents is shared
// evenly, a short content giving what it does not need to the others. A cut content
// ends with "…", and Note says so. Results too many for the budget even without
// contents are dropped from the end.
func (r Results) Fit(budget int) Results {
	size := func(x Results) int {
		b, _ := json.Marshal(x)
		return len(b)
	}
	if size(r) <= budget {
		return r
	}
	out := r
	out.Results = append([]Result(nil), r.Results...)
	note := fmt.Sprintf("contents cut to fit the output budget of %d KiB: search one package, or ask for an outline", budget>>10)
	if out.Note != "" {
		note = out.Note + "; " + note
	}
	out.Note = note
	bare := out
	bare.Results = make([]Result, len(out.Results))
	for i, x := range out.Results {
		x.Content = ""
		bare.Results[i] = x
	}
	for len(bare.Results) > 0 && size(bare) > budget {
		bare.Results = bare.Results[:len(bare.Results)-1]
		out.Results = out.Results[:len(out.Results)-1]
	}
	// JSON escaping can make a content longer than its bytes: measure each, and
	// shrink the room until the whole fits.
	room := budget - size(bare)
	for range 8 {
		shares := waterFill(out.Results, room)
		fitted := out
		fitted.Results = make([]Result, len(out.Results))
		for i, x := range out.Results {
			if len(x.Content) > shares[i] {
				x.Content = clip(x.Content, max(shares[i]-len("…"), 0)) + "…"
			}
			fitted.Results[i] = x
		}
		over := size(fitted) - budget
		if over <= 0 {
			return fitted
		}
		room -= over + 16
	}
	return bare
}

// waterFill shares room among the contents: each gets up to an even share, and what a
// short one leaves goes to the longer ones.
func waterFill(rs []Result, room int) []int {
	shares := make([]int, len(rs))
	left := make([]int, 0, len(rs))
	for i := range rs {
		left = append(left, i)
	}
	for room > 0 && len(left) > 0 {
		even := room / len(left)
		if even == 0 {
			break
		}
		var next []int
		for _, i := range left {
			need := len(rs[i].Content) - shares[i]
			if need <= even {
				shares[i] += need
				room -= need
			} else {
				shares[i] += even
				room -= even
				next = append(next, i)
			}
		}
		left = next
	}
	return shares
}
